//! Omise (Opn Payments) charges and refunds, classified into payonce's outcome classes (approved,
//! declined, rejected, refused, not sent, unknown; for refunds: answered, not sent, unknown), on
//! the model of the Stripe adapter: the adapter builds each call whole and a [`PspTransport`]
//! carries it. Sources are in `docs/psp-research.md` (§1–§5 of the Omise part); what it marks
//! UNCONFIRMED is designed around here, and each such place says so.
//!
//! Every call carries HTTP Basic authentication with the secret key as the user name and an empty
//! password (`Authorization: Basic base64("skey_…:")`, as every Omise example's `-u skey_…:`) and
//! `Omise-Version: 2019-05-29` (the header outranks the account's version). Creates also carry
//! `Idempotency-Key`, although **no official Omise source documents it** (only an unreliable
//! third-party page does): it is sent because it is harmless, and nothing here relies on it.
//! What protects a charge instead is documented: a card token is **single use** ("Any attempt to
//! re-use a token will result in a `used_token` error"), so a re-sent `POST /charges` with the same
//! `tokn_…` either creates the one charge (the earlier call never consumed the token) or fails
//! with `used_token` — never a second charge. Refunds have no such protection, so a refund create
//! looks for our refund on the charge before it posts one (see [`Psp::create_refund`] below).
//!
//! A declined card is not an HTTP error at Omise: the charge is created and answered with 200 and
//! `"status":"failed"`. Error answers are `{"object":"error","code":…,"message":…}`; which codes
//! come with which status is only partly documented, so errors are classified by `code` (and only
//! 4xx codes known to be definitive are definitive), never by status alone, and any code not
//! recognised here is unknown — never a guess that releases an order.
//!
//! The charge reading (status → settlement) is the webhook's (`omise_webhook::charge_settlement`),
//! so an answer, a lookup and a webhook about the same charge always say the same thing.

use super::b64::{self, Alphabet};
use super::keyed::{self, credentials_refused, NoAnswer, Sent};
use super::omise_webhook::{authorize_uri, charge_settlement, refund_settlement};
use super::transport::{CallFailure, HttpTransport, PspTransport, WireBody, WireCall, WireReply};
use crate::domain::{Payment, RefundSettlement, Settlement};
use crate::ports::{
    ChargeRequest, CheckedAmount, Fence, OperationOutcome, OperationRequest, Psp, PspError,
    PspLookup, PspOutcome, RefundOutcome, RefundRequest,
};
use async_trait::async_trait;
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// Omise's API base URL.
pub const OMISE_API_BASE: &str = "https://api.omise.co";

/// The API version pinned on every call (`Omise-Version`). Webhook events are serialised in the
/// account's default version whatever this header says, so pin the account to the same version.
pub const OMISE_API_VERSION: &str = "2019-05-29";

/// How many refunds one page of a charge's refund list asks for (Omise lists: `limit` up to 100,
/// per a third-party docstring; paging counts what actually came, so a lower cap still works).
const REFUND_PAGE_LIMIT: u64 = 100;
/// How many pages of a charge's refunds are read before giving up (Omise allows fewer than 15
/// refunds per charge: one page is the norm).
const REFUND_PAGES_MAX: usize = 10;
/// How many pages of search results a lookup reads before giving up (Omise's default page holds
/// 30; our query matches one charge per attempt).
const SEARCH_PAGES_MAX: u64 = 5;

/// Settings of the Omise adapter.
#[derive(Clone)]
pub struct OmiseConfig {
    /// API base URL: [`OMISE_API_BASE`] in production; the fake PSP's URL in tests.
    pub base_url: String,
    /// Secret key, `skey_…` (`skey_test_…` in test mode), from Secrets Manager or SSM; never
    /// logged, never shown by `Debug`.
    pub secret_key: String,
    /// Limit for establishing a connection (a failure here means "not sent").
    pub connect_timeout: Duration,
    /// Upper bound of one request; the charge path lowers it to the time the invocation has left.
    pub request_timeout: Duration,
    /// Name stored on payments (`omise`).
    pub provider_name: String,
}

impl std::fmt::Debug for OmiseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OmiseConfig")
            .field("base_url", &self.base_url)
            .field("secret_key", &"<redacted>")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("provider_name", &self.provider_name)
            .finish()
    }
}

impl OmiseConfig {
    /// Defaults for `secret_key` against [`OMISE_API_BASE`]: 3 s to connect, 10 s per request,
    /// provider `omise`.
    pub fn new(secret_key: impl Into<String>) -> Self {
        Self {
            base_url: OMISE_API_BASE.to_owned(),
            secret_key: secret_key.into(),
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(10),
            provider_name: "omise".into(),
        }
    }

    /// The same settings against another API base (e.g. the fake PSP).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }
}

/// The Omise adapter: builds the Charges and Refunds calls and classifies their answers.
///
/// Its proof that a key was never used: **none** ([`Psp::fence`] answers [`Fence::Unprovable`]),
/// so an attempt that stays unknown past the bound waits for an operator (`payment-unprovable`).
#[derive(Clone)]
pub struct OmisePsp<T = HttpTransport> {
    transport: T,
    provider_name: String,
    /// `Basic base64("<secret key>:")`, sent on every call (never logged).
    authorization: String,
    request_timeout: Duration,
}

impl<T: std::fmt::Debug> std::fmt::Debug for OmisePsp<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OmisePsp")
            .field("transport", &self.transport)
            .field("provider_name", &self.provider_name)
            .field("authorization", &"<redacted>")
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl OmisePsp<HttpTransport> {
    /// Omise (or the fake PSP speaking its format) over HTTPS at `config.base_url`.
    pub fn new(config: OmiseConfig) -> Result<Self, reqwest::Error> {
        let transport = HttpTransport::new(
            config.base_url,
            config.connect_timeout,
            config.request_timeout,
        )?;
        Ok(Self::with_transport(
            transport,
            config.provider_name,
            config.secret_key,
            config.request_timeout,
        ))
    }
}

/// Whether `id` can be an Omise object id (`chrg_…`, `chrg_test_…`) and so be put in a path as
/// it is: nothing but ASCII letters, digits and `_`.
pub(super) fn is_object_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether an error status is the caller's (4xx) and not a busy answer: only those can carry a
/// definitive refusal.
pub(super) fn is_client_error(status: u16) -> bool {
    (400..500).contains(&status) && !matches!(status, 401 | 403 | 409 | 429)
}

impl<T: PspTransport> OmisePsp<T> {
    /// The adapter over any transport, storing `provider_name` on payments and authenticating
    /// every call with `secret_key` as the Basic user name (empty password).
    pub fn with_transport(
        transport: T,
        provider_name: impl Into<String>,
        secret_key: impl AsRef<str>,
        request_timeout: Duration,
    ) -> Self {
        let credentials = format!("{}:", secret_key.as_ref());
        Self {
            transport,
            provider_name: provider_name.into(),
            authorization: format!(
                "Basic {}",
                b64::encode(credentials.as_bytes(), Alphabet::Standard)
            ),
            request_timeout,
        }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// A call to Omise's API: authenticated, version pinned, under `idempotency_key` if given
    /// (creates only).
    pub(super) fn call(
        &self,
        method: &'static str,
        path: String,
        query: Vec<(String, String)>,
        body: WireBody,
        idempotency_key: Option<&str>,
    ) -> WireCall {
        let mut headers = vec![
            ("Authorization".to_owned(), self.authorization.clone()),
            ("Omise-Version".to_owned(), OMISE_API_VERSION.to_owned()),
        ];
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

    /// `POST /charges` under the request's key: `amount` (the currency's smallest unit, as
    /// payonce stores it; yen is Omise's only zero-decimal currency, as ours), `currency`
    /// (lowercase ISO code, as Omise's own examples send it), `card` (the `tokn_…` as the client
    /// gave it), `capture=true` (Omise's default, sent explicitly: no authorise-only charge can
    /// be created by accident), `description` = our payment id (a documented Search attribute,
    /// which [`Psp::lookup`] relies on; metadata searchability is UNCONFIRMED) and
    /// `metadata[payment_id]`. A pure function of the request, so every re-send is
    /// byte-identical. A manual capture sends `capture=false` (an authorization, captured or
    /// reversed later); a request with a `return_url` sends it as `return_uri`, where Omise
    /// brings the customer back after 3-D Secure (without one a 3-D Secure charge stays
    /// `pending` and ends `expired`/`failed`).
    fn charge_call(&self, request: &ChargeRequest) -> WireCall {
        let capture = match request.capture {
            crate::domain::CaptureMethod::Automatic => "true",
            crate::domain::CaptureMethod::Manual => "false",
        };
        let mut form = vec![
            ("amount".to_owned(), request.amount.to_string()),
            ("currency".to_owned(), request.currency.as_str().to_owned()),
            ("card".to_owned(), request.payment_method.clone()),
            ("capture".to_owned(), capture.to_owned()),
            ("description".to_owned(), request.payment_id.clone()),
            (
                "metadata[payment_id]".to_owned(),
                request.payment_id.clone(),
            ),
        ];
        if let Some(url) = &request.return_url {
            form.push(("return_uri".to_owned(), url.clone()));
        }
        self.call(
            "POST",
            "/charges".to_owned(),
            Vec::new(),
            WireBody::Form(form),
            Some(&request.idempotency_key),
        )
    }

    /// `POST /charges/{id}/refunds` under the request's key: `amount` and our ids as metadata —
    /// a pure function of the request. The currency is the charge's; Omise has no `reason`.
    fn refund_call(&self, request: &RefundRequest) -> WireCall {
        let form = vec![
            ("amount".to_owned(), request.amount.to_string()),
            ("metadata[refund_id]".to_owned(), request.refund_id.clone()),
            (
                "metadata[payment_id]".to_owned(),
                request.payment_id.clone(),
            ),
        ];
        self.call(
            "POST",
            format!("/charges/{}/refunds", request.provider_payment_id),
            Vec::new(),
            WireBody::Form(form),
            Some(&request.idempotency_key),
        )
    }

    /// A call that is not a create, within `timeout`: any failure is a [`PspError`].
    pub(super) async fn plain(
        &self,
        call: WireCall,
        timeout: Duration,
    ) -> Result<WireReply, PspError> {
        self.transport
            .send(&call, timeout.min(self.request_timeout))
            .await
            .map_err(|failure| PspError {
                reason: match failure {
                    CallFailure::NotConnected(reason) | CallFailure::AfterConnect(reason) => reason,
                },
            })
    }

    /// Our refund `refund_id` among the refunds of `charge` (`GET /charges/{id}/refunds`, paged
    /// with `limit`/`offset`, oldest first so the pages do not shift while new refunds are added),
    /// by `metadata.refund_id`; each call within what is left before `deadline`, if given.
    async fn find_refund(
        &self,
        charge: &str,
        refund_id: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<RefundSettlement>, PspError> {
        if !is_object_id(charge) {
            return Err(PspError {
                reason: format!("{charge:?} is not an Omise charge id"),
            });
        }
        let mut offset: u64 = 0;
        let mut ours: Vec<RefundSettlement> = Vec::new();
        for _ in 0..REFUND_PAGES_MAX {
            let timeout = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => self.request_timeout,
            };
            if timeout.is_zero() {
                return Err(PspError {
                    reason: "no time left to list the charge's refunds".into(),
                });
            }
            let query = vec![
                ("limit".to_owned(), REFUND_PAGE_LIMIT.to_string()),
                ("offset".to_owned(), offset.to_string()),
                ("order".to_owned(), "chronological".to_owned()),
            ];
            let reply = self
                .plain(
                    self.call(
                        "GET",
                        format!("/charges/{charge}/refunds"),
                        query,
                        WireBody::Empty,
                        None,
                    ),
                    timeout,
                )
                .await?;
            if reply.status != 200 {
                return Err(PspError {
                    reason: format!("refund list answered {}", reply.status),
                });
            }
            let page: Value = serde_json::from_slice(&reply.body).map_err(|e| PspError {
                reason: format!("unreadable refund list: {e}"),
            })?;
            let Some(refunds) = page["data"].as_array() else {
                return Err(PspError {
                    reason: "the refund list has no data".into(),
                });
            };
            for refund in refunds {
                if refund["metadata"]["refund_id"].as_str() != Some(refund_id) {
                    continue;
                }
                let Some(id) = refund["id"].as_str() else {
                    return Err(PspError {
                        reason: "a refund of ours has no id".into(),
                    });
                };
                ours.push(refund_settlement(refund, id.to_owned()));
            }
            offset += refunds.len() as u64;
            let more = match page["total"].as_u64() {
                Some(total) => offset < total,
                None => refunds.len() as u64 >= REFUND_PAGE_LIMIT,
            };
            if refunds.is_empty() || !more {
                // One refund per refund id; should there be more (a re-send Omise did not
                // recognise), the strongest word wins: succeeded, then pending, then failed.
                return Ok(ours.into_iter().max_by_key(refund_rank));
            }
        }
        // Not found in the pages read is no proof that it is not there.
        Err(PspError {
            reason: format!(
                "more than {} refunds of {charge}: the lookup gave up",
                REFUND_PAGES_MAX as u64 * REFUND_PAGE_LIMIT
            ),
        })
    }
}

/// How strong a word on a refund is, when more than one refund carries our id.
fn refund_rank(settlement: &RefundSettlement) -> u8 {
    match settlement {
        RefundSettlement::Succeeded { .. } => 3,
        RefundSettlement::Pending { .. } => 2,
        RefundSettlement::Failed { .. } => 1,
        RefundSettlement::Canceled => 0,
    }
}

/// Whether a search hit is a charge of attempt `payment_id`: its `metadata.payment_id` is ours,
/// or, for a charge without one, its `description` is (both are what [`OmisePsp`] sends; the
/// search `query` is a text match, so every hit is checked exactly).
fn is_ours(charge: &Value, payment_id: &str) -> bool {
    if charge["object"].as_str() != Some("charge") {
        return false;
    }
    match charge["metadata"]["payment_id"].as_str() {
        Some(ours) => ours == payment_id,
        None => charge["description"].as_str() == Some(payment_id),
    }
}

/// What one of our charges says, read as the webhook reads it: `successful` → succeeded;
/// `failed`, `expired` and `reversed` → declined (PSP-confirmed, no money kept — not
/// [`PspLookup::Canceled`], which means "payonce may infer abandoned"); `pending` and any other
/// status → pending, never "not found".
fn lookup_of(charge: &Value) -> Result<PspLookup, PspError> {
    let Some(id) = charge["id"].as_str() else {
        return Err(PspError {
            reason: "a charge of ours has no id".into(),
        });
    };
    if let Some(url) = authorize_uri(charge) {
        return Ok(PspLookup::ActionRequired {
            provider_payment_id: id.to_owned(),
            redirect_url: url.to_owned(),
        });
    }
    Ok(match charge_settlement(charge, Some(id.to_owned())) {
        Some(Settlement::Succeeded {
            provider_payment_id,
        }) => PspLookup::Succeeded {
            provider_payment_id,
            amount: CheckedAmount::of_object(charge),
        },
        Some(Settlement::Captured {
            provider_payment_id,
            amount_captured,
        }) => PspLookup::Captured {
            provider_payment_id,
            amount_captured,
            amount: CheckedAmount::of_object(charge),
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
        Some(Settlement::Canceled {
            provider_payment_id,
            reason,
        }) => PspLookup::Canceled {
            provider_payment_id: provider_payment_id.unwrap_or_else(|| id.to_owned()),
            reason: Some(reason),
        },
        Some(Settlement::AuthenticationFailed {
            provider_payment_id,
        }) => PspLookup::Declined {
            provider_payment_id: provider_payment_id.unwrap_or_else(|| id.to_owned()),
            decline_code: crate::ports::AUTHENTICATION_FAILED_CODE.to_owned(),
            amount: CheckedAmount::of_object(charge),
        },
        Some(Settlement::Declined {
            provider_payment_id,
            decline_code,
        }) => PspLookup::Declined {
            provider_payment_id: provider_payment_id.unwrap_or_else(|| id.to_owned()),
            decline_code,
            amount: CheckedAmount::of_object(charge),
        },
        // `pending` (3-D Secure, not yet authorised or captured), a status unknown here, and the
        // settlements a charge never reads as (rejected, refused, abandoned): not final.
        _ => PspLookup::Pending {
            provider_payment_id: id.to_owned(),
        },
    })
}

/// Classifies a charge object answered to a create, as the webhook reads it: `successful` →
/// approved; `failed` (the issuer's or network's verdict on a created charge: `insufficient_fund`,
/// `stolen_or_lost_card`, `payment_rejected`…), `expired` and `reversed` → declined with the
/// `chrg_…` id; `pending` (3-D Secure or an asynchronous method: payonce has no redirect flow) and
/// any other status → unknown, settled later by webhook or reconcile.
fn classify_charge_object(charge: &Value) -> PspOutcome {
    let id = charge["id"].as_str().map(str::to_owned);
    if let (Some(url), Some(id)) = (authorize_uri(charge), id.clone()) {
        return PspOutcome::ActionRequired {
            provider_payment_id: id,
            redirect_url: url.to_owned(),
        };
    }
    match charge_settlement(charge, id.clone()) {
        Some(Settlement::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        }) => PspOutcome::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        },
        Some(Settlement::AuthenticationFailed {
            provider_payment_id,
        }) => PspOutcome::Declined {
            provider_payment_id,
            decline_code: crate::ports::AUTHENTICATION_FAILED_CODE.to_owned(),
        },
        Some(Settlement::Succeeded {
            provider_payment_id,
        }) => PspOutcome::Approved {
            provider_payment_id,
        },
        Some(Settlement::Declined {
            provider_payment_id,
            decline_code,
        }) => PspOutcome::Declined {
            provider_payment_id,
            decline_code,
        },
        _ => PspOutcome::Unknown {
            reason: format!(
                "charge {} is {}",
                id.as_deref().unwrap_or("<no id>"),
                charge["status"].as_str().unwrap_or("<no status>")
            ),
        },
    }
}

/// Classifies an error object answered to a charge create, by `code` (docs.omise.co/api-errors;
/// which status carries which code is only partly documented, so the code decides, and only a
/// 4xx that is not busy can be definitive):
///
/// - the payment method is invalid → rejected: `invalid_card`, `invalid_card_token`,
///   `missing_card`, `brand_not_supported`, and `not_found` (omise-go's live test: 404 "token …
///   was not found"; payonce sends no other object id in a charge). Nothing was charged.
/// - the request is invalid for another reason → refused: `invalid_charge` (e.g. an unsupported
///   currency; the code below the minimum amount is UNCONFIRMED, likely this one),
///   `invalid_amount`, `failed_multi_currency`. These depend only on the request, which every
///   re-send repeats byte for byte, so an earlier call under the key was refused alike.
/// - `used_token` → **unknown**, never rejected: the token was consumed, and the adapter cannot
///   tell by whom. After a lost answer (a call that connected and timed out, a taken-over lease)
///   the consumer is most likely *our own earlier call*, whose charge may exist — or, if Omise
///   does honour `Idempotency-Key` (UNCONFIRMED), would have been replayed instead. Classing it
///   rejected would release the order over a charge. The price: a client that presents an
///   already-spent token gets an unknown outcome that reconcile cannot prove (Omise has no
///   fence) and an operator settles.
/// - `bad_request` → unknown: generic, undocumented in detail, and it could be how Omise's
///   undocumented idempotency layer complains; never a refusal on a guess. `backend_error` ("try
///   again") → unknown. Any other code, 409, 429, 5xx → unknown.
fn classify_charge_error(status: u16, error: &Value) -> PspOutcome {
    let code = error["code"].as_str().unwrap_or("");
    let definitive = is_client_error(status);
    match code {
        "invalid_card"
        | "invalid_card_token"
        | "missing_card"
        | "brand_not_supported"
        | "not_found"
            if definitive =>
        {
            PspOutcome::Rejected {
                message: error["message"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("the payment method was rejected ({code})")),
            }
        }
        "invalid_charge" | "invalid_amount" | "failed_multi_currency" if definitive => {
            PspOutcome::Refused {
                code: code.to_owned(),
            }
        }
        "used_token" => {
            tracing::warn!(
                status,
                "Omise answered used_token: the token was consumed, maybe by an earlier call under this key; the outcome is unknown"
            );
            PspOutcome::Unknown {
                reason: format!(
                    "PSP answered {status} used_token: the card token was already used, maybe by an earlier call under this key"
                ),
            }
        }
        _ => {
            if definitive && code != "backend_error" {
                tracing::error!(
                    status,
                    code,
                    "an Omise error code this adapter does not know; the outcome is unknown"
                );
            }
            PspOutcome::Unknown {
                reason: format!("PSP answered {status} {code}"),
            }
        }
    }
}

/// Classifies the last answer to a charge create (not yet considering earlier answers).
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
    match body["object"].as_str() {
        Some("charge") if (200..300).contains(&reply.status) => classify_charge_object(&body),
        Some("error") => classify_charge_error(reply.status, &body),
        _ => PspOutcome::Unknown {
            reason: format!(
                "PSP answered {} with neither a charge nor an error",
                reply.status
            ),
        },
    }
}

/// Classifies the last answer to a refund create: a refund object → answered with what it says
/// (succeeded: Omise refunds are final once created); a definitive refusal (`failed_refund`,
/// `invalid_amount` — e.g. more than is left —, `not_found` — no such charge) → answered failed,
/// unless an earlier call under the key was answered: then our own earlier request may have
/// refunded already (these refusals depend on the charge's state, unlike a charge's), so it is
/// unknown; 401/403 → not sent (alarm) unless an earlier call was answered; everything else
/// (`bad_request`, `backend_error`, unknown codes, 409, 429, 5xx, unreadable) → unknown.
/// `resend`: an earlier call under the refund's key may have reached Omise. Omise documents no
/// idempotency for refunds, so a refusal then ("fully refunded", "amount too large") may be
/// caused by that very earlier refund: it proves nothing, and the outcome is unknown.
fn classify_refund(Sent { reply, retried, .. }: Sent, resend: bool) -> RefundOutcome {
    let retried = retried || resend;
    if matches!(reply.status, 401 | 403) {
        let reason = credentials_refused(reply.status);
        return if retried {
            // An earlier call under the key was answered: it may be known.
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
    match body["object"].as_str() {
        Some("refund") if (200..300).contains(&reply.status) => match body["id"].as_str() {
            Some(id) => RefundOutcome::Answered(refund_settlement(&body, id.to_owned())),
            None => RefundOutcome::Unknown {
                reason: "the PSP answered a refund without an id".into(),
            },
        },
        Some("error") => {
            let code = body["code"].as_str().unwrap_or("");
            let refusal = matches!(code, "failed_refund" | "invalid_amount" | "not_found");
            if refusal && is_client_error(reply.status) && !retried {
                RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: code.to_owned(),
                })
            } else {
                if !refusal && is_client_error(reply.status) && code != "backend_error" {
                    tracing::error!(
                        status = reply.status,
                        code,
                        "an Omise error code this adapter does not know; the refund outcome is unknown"
                    );
                }
                RefundOutcome::Unknown {
                    reason: format!(
                        "PSP answered {} {code}{}",
                        reply.status,
                        if refusal && retried {
                            " after an earlier answer"
                        } else {
                            ""
                        }
                    ),
                }
            }
        }
        _ => RefundOutcome::Unknown {
            reason: format!(
                "PSP answered {} with neither a refund nor an error",
                reply.status
            ),
        },
    }
}

#[async_trait]
impl<T: PspTransport> Psp for OmisePsp<T> {
    fn name(&self) -> &str {
        &self.provider_name
    }

    fn kind(&self) -> crate::domain::PspKind {
        crate::domain::PspKind::Omise
    }

    /// `POST /charges`, retrying busy answers (409, 429) like Stripe's path, with the same
    /// answered rule: a connection failure or a 401/403 after an earlier answer is unknown.
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        let call = self.charge_call(request);
        let Sent { reply, retried, .. } = match keyed::send_with_busy_retries(
            &self.transport,
            &call,
            timeout,
            self.request_timeout,
        )
        .await
        {
            Ok(sent) => sent,
            Err(NoAnswer::NotSent(reason)) => return PspOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => return PspOutcome::Unknown { reason },
        };
        match classify_charge(&reply) {
            // Credentials refused after an earlier answer: the key may be known.
            PspOutcome::NotSent { reason } if retried => PspOutcome::Unknown { reason },
            outcome => outcome,
        }
    }

    /// Searches charges for our payment id (`GET /search?scope=charge&query=<payment_id>`, paged
    /// by `page`): `description` (our payment id) is a documented query attribute; whether
    /// `metadata` is searched is UNCONFIRMED. Each hit is checked exactly (`is_ours`) and read
    /// as the webhook reads it; several → the strongest word (succeeded, pending, declined). No
    /// hit is [`PspLookup::NotFound`] — never proof: the search index's lag is undocumented
    /// (UNCONFIRMED), and a lookup never re-sends a create.
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        let mut found: Vec<PspLookup> = Vec::new();
        for page in 1..=SEARCH_PAGES_MAX {
            let query = vec![
                ("scope".to_owned(), "charge".to_owned()),
                ("query".to_owned(), payment_id.to_owned()),
                ("page".to_owned(), page.to_string()),
            ];
            let reply = self
                .plain(
                    self.call("GET", "/search".to_owned(), query, WireBody::Empty, None),
                    self.request_timeout,
                )
                .await?;
            if reply.status != 200 {
                return Err(PspError {
                    reason: format!("search answered {}", reply.status),
                });
            }
            let result: Value = serde_json::from_slice(&reply.body).map_err(|e| PspError {
                reason: format!("unreadable search answer: {e}"),
            })?;
            let Some(hits) = result["data"].as_array() else {
                return Err(PspError {
                    reason: "the search answer has no data".into(),
                });
            };
            for charge in hits.iter().filter(|charge| is_ours(charge, payment_id)) {
                found.push(lookup_of(charge)?);
            }
            if hits.is_empty() || page >= result["total_pages"].as_u64().unwrap_or(1) {
                return Ok(found
                    .into_iter()
                    .max_by_key(PspLookup::strength)
                    .unwrap_or(PspLookup::NotFound));
            }
        }
        Err(PspError {
            reason: format!(
                "more than {SEARCH_PAGES_MAX} pages of search results for {payment_id}: the lookup gave up"
            ),
        })
    }

    /// The charge whose id is stored, retrieved exactly (`GET /charges/{id}`, no search lag),
    /// checked to be ours; without a stored id, or when the retrieve fails, the search
    /// ([`Psp::lookup`]): Omise's search lags, and the id is persisted to be looked up by first.
    async fn lookup_payment(&self, payment: &Payment) -> Result<PspLookup, PspError> {
        if let Some(id) = payment
            .provider_payment_id
            .as_deref()
            .filter(|id| is_object_id(id))
        {
            let call = self.call(
                "GET",
                format!("/charges/{id}"),
                Vec::new(),
                WireBody::Empty,
                None,
            );
            if let Ok(reply) = self.plain(call, self.request_timeout).await {
                if reply.status == 200 {
                    if let Ok(charge) = serde_json::from_slice::<Value>(&reply.body) {
                        if is_ours(&charge, &payment.payment_id) {
                            return lookup_of(&charge);
                        }
                    }
                }
            }
        }
        self.lookup(&payment.payment_id).await
    }

    /// Omise offers no proof that a key was never used: it documents no idempotency at all, and
    /// no equivalent of Stripe's `confirm=false` re-send that would create, under the key, an
    /// unconfirmed charge blocking any late one. So: [`Fence::Unprovable`], without a call; an
    /// attempt not found past the bound alarms and waits for an operator (`payment-unprovable`).
    ///
    /// Future work, UNVERIFIED (needs an Omise test-mode experiment first): consume the attempt's
    /// single-use card token without charging, by attaching it to a new customer
    /// (`POST /customers` with `card=<tokn_…>`; a token can be used once "either to make a charge
    /// or to associate as a new card on a customer"). Success would prove the token — hence the
    /// attempt — never charged and never can; `used_token` would mean it was used. Unknown: whether
    /// attaching runs a card authorisation, and how it races a charge still in flight.
    async fn fence(&self, _request: &ChargeRequest) -> Result<Fence, PspError> {
        Ok(Fence::Unprovable)
    }

    /// Never meaningful for Omise: reconcile cancels only the unconfirmed charge a
    /// [`Fence::NeverRan`] created, and this adapter's fence never creates one. Refused without a
    /// call, so a caller that gets here by mistake learns it instead of believing a charge was
    /// cancelled (Omise's own reversal of an authorised charge is not what this port means).
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        Err(PspError {
            reason: format!(
                "Omise charges are never cancelled by payonce (no fence creates one): {provider_payment_id} left as it is"
            ),
        })
    }

    /// A partial capture needs a `pre_auth` charge, which only merchants contracted with Omise
    /// Thailand may create ("Capture": Single Partial Capture); payonce creates `final_auth`
    /// ones, Omise's default, captured whole.
    fn captures_partially(&self) -> bool {
        false
    }

    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        self.operate_charge(request, timeout).await
    }

    /// `POST /charges/{id}/refunds` — after looking for our refund on the charge first. Omise
    /// documents no idempotency for refunds (UNCONFIRMED that `Idempotency-Key` does anything) and
    /// a refund has no single-use token, so a blind re-send after a lost answer could refund
    /// twice. Listing the charge's refunds (a list, not a lagging search) first makes every re-send
    /// (a taken-over lease, reconcile) answer with the refund that exists. If the list fails,
    /// nothing is posted: this call is not sent. What remains is a race with a create of ours
    /// still in flight at Omise when the list is read — narrow, since a re-send only follows a
    /// lapsed lease, and the one place where the key would have to help.
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        if !is_object_id(&request.provider_payment_id) {
            return RefundOutcome::NotSent {
                reason: format!(
                    "{:?} is not an Omise charge id: nothing sent",
                    request.provider_payment_id
                ),
            };
        }
        let started = Instant::now();
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
                        "the charge's refunds could not be listed, so no refund was sent: {}",
                        error.reason
                    ),
                }
            }
        }
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            return RefundOutcome::NotSent {
                reason: "no time left to send the refund".into(),
            };
        }
        let call = self.refund_call(request);
        match keyed::send_with_busy_retries(&self.transport, &call, left, self.request_timeout)
            .await
        {
            Ok(sent) => classify_refund(sent, request.resend),
            Err(NoAnswer::NotSent(reason)) => RefundOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => RefundOutcome::Unknown { reason },
        }
    }

    /// Lists the charge's refunds (`GET /charges/{id}/refunds`, paged by `limit`/`offset`) and
    /// reads the one whose `metadata.refund_id` is ours.
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
    use crate::domain::Currency;
    use serde_json::json;

    /// The secret key the scripted adapters authenticate with.
    const SECRET: &str = "skey_test_scripted";
    /// `Basic ` + base64("skey_test_scripted:"), computed independently (Python's
    /// `base64.b64encode(b"skey_test_scripted:")`).
    const BASIC: &str = "Basic c2tleV90ZXN0X3NjcmlwdGVkOg==";

    const PAY: &str = "pay_0123456789abcdef0123456789abcdef";
    const CHARGE: &str = "chrg_test_4yq7duw15p9hdrjp8oq";
    const TOKEN: &str = "tokn_test_5xuy4w91xdz7ky4jnqc";

    fn scripted(steps: impl IntoIterator<Item = Step>) -> OmisePsp<Scripted> {
        OmisePsp::with_transport(
            Scripted::new(steps),
            "omise",
            SECRET,
            Duration::from_secs(10),
        )
    }

    fn calls(psp: &OmisePsp<Scripted>) -> Vec<WireCall> {
        psp.transport().calls()
    }

    fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn request() -> ChargeRequest {
        ChargeRequest {
            payment_id: PAY.into(),
            amount: 100000,
            currency: Currency::Thb,
            payment_method: TOKEN.into(),
            idempotency_key: format!("payonce-charge-{PAY}"),
            return_url: None,
            capture: crate::domain::CaptureMethod::Automatic,
            earlier_may_run: false,
        }
    }

    /// A card charge as Omise serialises it (shape of omise-go's charges-post fixture).
    fn charge(id: &str, status: &str, failure_code: Option<&str>, payment_id: &str) -> Value {
        json!({
            "object": "charge",
            "id": id,
            "location": format!("/charges/{id}"),
            "livemode": false,
            "amount": 100000,
            "currency": "thb",
            "description": payment_id,
            "metadata": {"payment_id": payment_id},
            "status": status,
            "capture": true,
            "authorized": status == "successful",
            "reversed": status == "reversed",
            "expired": status == "expired",
            "paid": status == "successful",
            "authorize_uri": if status == "pending" { json!("https://api.omise.co/payments/paym_test_1/authorize") } else { Value::Null },
            "failure_code": failure_code,
            "failure_message": failure_code.map(|_| "the charge failed"),
            "refunded_amount": 0,
            "refunds": {"object": "list", "data": [], "limit": 20, "offset": 0, "total": 0},
            "card": {"object": "card", "id": "card_test_4yq6tuucl9h4erukfl0", "brand": "Visa", "last_digits": "4242"},
            "created_at": "2015-01-15T05:00:29Z",
        })
    }

    /// An authorise-only charge (`capture=false`) in `status`, held while `authorized`.
    fn authorise_only(status: &str, authorized: bool) -> Value {
        let mut charge = charge(CHARGE, status, None, PAY);
        charge["capture"] = json!(false);
        charge["authorized"] = json!(authorized);
        charge["paid"] = json!(status == "successful");
        charge["authorize_uri"] = Value::Null;
        charge["expires_at"] = json!("2026-12-11T05:00:00Z");
        charge
    }

    #[tokio::test]
    async fn a_manual_charge_with_a_return_url_asks_for_both_and_reads_each_state() {
        // GIVEN a request for a manual capture that may ask the customer to authenticate
        let mut manual = request();
        manual.capture = crate::domain::CaptureMethod::Manual;
        manual.return_url = Some("https://shop.example/return".into());
        let mut waiting = charge(CHARGE, "pending", None, PAY);
        waiting["capture"] = json!(false);
        waiting["authorized"] = json!(false);
        waiting["return_uri"] = json!("https://shop.example/return");
        let psp = scripted([reply(200, waiting)]);
        // WHEN it is created THEN the form says capture=false and the return_uri, and the
        // pending charge with its authorize_uri asks for the customer
        let outcome = psp.create_charge(&manual, Duration::from_secs(5)).await;
        assert_eq!(
            outcome,
            PspOutcome::ActionRequired {
                provider_payment_id: CHARGE.into(),
                redirect_url: "https://api.omise.co/payments/paym_test_1/authorize".into(),
            }
        );
        let WireBody::Form(form) = &calls(&psp)[0].body else {
            panic!("a form")
        };
        assert!(
            form.contains(&("capture".into(), "false".into())),
            "{form:?}"
        );
        assert!(
            form.contains(&("return_uri".into(), "https://shop.example/return".into())),
            "{form:?}"
        );
        // AND an authorized charge is an authorization, until when it is held
        assert_eq!(
            classify_charge_object(&authorise_only("pending", true)),
            PspOutcome::Authorized {
                provider_payment_id: CHARGE.into(),
                amount_capturable: 100000,
                capture_before_ms: Some(1_796_965_200_000),
            }
        );
        // AND without a return_uri a pending charge is unknown, as it always was
        assert!(matches!(
            classify_charge_object(&charge(CHARGE, "pending", None, PAY)),
            PspOutcome::Unknown { .. }
        ));
        // AND an authorise-only charge's later states: captured, reversed, expired
        let id = Some(CHARGE.to_owned());
        assert_eq!(
            charge_settlement(&authorise_only("successful", true), id.clone()),
            Some(Settlement::Captured {
                provider_payment_id: CHARGE.into(),
                amount_captured: 100000,
            })
        );
        assert_eq!(
            charge_settlement(&authorise_only("reversed", true), id.clone()),
            Some(Settlement::Canceled {
                provider_payment_id: id.clone(),
                reason: crate::domain::CancellationReason::Requested,
            })
        );
        // A lapsed or failed authorization holds nothing any more: canceled (expired). (Word of
        // an expired charge without `authorized`, a decline, ends an authorized payment too:
        // the transition cancels it.)
        for (status, authorized) in [("expired", true), ("failed", true)] {
            assert_eq!(
                charge_settlement(&authorise_only(status, authorized), id.clone()),
                Some(Settlement::Canceled {
                    provider_payment_id: id.clone(),
                    reason: crate::domain::CancellationReason::Expired,
                }),
                "{status} authorized={authorized}"
            );
        }
        // A 3-D Secure charge that expired waiting for its customer failed: nothing was held.
        let mut unanswered = authorise_only("expired", false);
        unanswered["authorize_uri"] = json!("https://api.omise.co/payments/paym_test_1/authorize");
        assert_eq!(
            charge_settlement(&unanswered, id.clone()),
            Some(Settlement::Declined {
                provider_payment_id: id,
                decline_code: "expired".into(),
            })
        );
    }

    fn operation(kind: crate::domain::OperationKind) -> OperationRequest {
        OperationRequest {
            kind,
            payment_id: PAY.into(),
            provider_payment_id: CHARGE.into(),
            amount: Some(100000),
            payment_amount: 100000,
            capture: crate::domain::CaptureMethod::Manual,
            currency: Currency::Thb,
            idempotency_key: format!("payonce-{}-{PAY}", kind.as_str()),
        }
    }

    #[tokio::test]
    async fn a_capture_looks_first_then_posts_and_reads_the_charge_it_leaves() {
        use crate::domain::OperationKind::{Cancel, Capture};
        // GIVEN an authorization: the look finds it held, the capture takes it
        let psp = scripted([
            reply(200, authorise_only("pending", true)),
            reply(200, authorise_only("successful", true)),
        ]);
        let outcome = psp
            .operate(&operation(Capture), Duration::from_secs(5))
            .await;
        assert_eq!(
            outcome,
            OperationOutcome::Answered(Settlement::Captured {
                provider_payment_id: CHARGE.into(),
                amount_captured: 100000,
            })
        );
        let sent = calls(&psp);
        assert_eq!(
            sent.iter()
                .map(|c| (c.method, c.path.as_str()))
                .collect::<Vec<_>>(),
            [
                ("GET", format!("/charges/{CHARGE}").as_str()),
                ("POST", format!("/charges/{CHARGE}/capture").as_str())
            ]
        );
        assert_eq!(
            sent[1].header("Idempotency-Key"),
            Some(format!("payonce-capture-{PAY}").as_str())
        );

        // GIVEN a charge already captured (an earlier call's answer was lost): answered from
        // the look, nothing posted
        let psp = scripted([reply(200, authorise_only("successful", true))]);
        let outcome = psp
            .operate(&operation(Capture), Duration::from_secs(5))
            .await;
        assert!(matches!(
            outcome,
            OperationOutcome::Answered(Settlement::Captured { .. })
        ));
        assert_eq!(calls(&psp).len(), 1);

        // GIVEN a reverse refused because the charge was captured meanwhile: the charge answers
        let psp = scripted([
            reply(200, authorise_only("pending", true)),
            omise_error(400, "failed_reverse"),
            reply(200, authorise_only("successful", true)),
        ]);
        let outcome = psp
            .operate(&operation(Cancel), Duration::from_secs(5))
            .await;
        assert!(
            matches!(
                outcome,
                OperationOutcome::Answered(Settlement::Captured { .. })
            ),
            "{outcome:?}"
        );
        assert_eq!(calls(&psp)[1].path, format!("/charges/{CHARGE}/reverse"));

        // GIVEN a refusal of a charge that did not move: refused for good
        let psp = scripted([
            reply(200, authorise_only("pending", true)),
            omise_error(400, "failed_capture"),
            reply(200, authorise_only("pending", true)),
        ]);
        assert_eq!(
            psp.operate(&operation(Capture), Duration::from_secs(5))
                .await,
            OperationOutcome::Refused {
                code: "failed_capture".into()
            }
        );
        // GIVEN a look that cannot be made: nothing posted
        let psp = scripted([not_connected()]);
        assert!(matches!(
            psp.operate(&operation(Capture), Duration::from_secs(5))
                .await,
            OperationOutcome::NotSent { .. }
        ));
        // AND a capture that connected and got no answer is unknown
        let psp = scripted([reply(200, authorise_only("pending", true)), after_connect()]);
        assert!(matches!(
            psp.operate(&operation(Capture), Duration::from_secs(5))
                .await,
            OperationOutcome::Unknown { .. }
        ));
        assert!(!psp.captures_partially());
    }

    fn ours(status: &str, failure_code: Option<&str>) -> Step {
        reply(200, charge(CHARGE, status, failure_code, PAY))
    }

    /// An error object as Omise answers it (docs.omise.co/api-errors).
    fn omise_error(status: u16, code: &str) -> Step {
        reply(
            status,
            json!({
                "object": "error",
                "location": format!("https://www.omise.co/api-errors#{code}"),
                "code": code,
                "message": format!("scripted {code}"),
            }),
        )
    }

    fn rate_limited() -> Step {
        omise_error(429, "rate_limit")
    }

    fn busy() -> Step {
        omise_error(409, "conflict")
    }

    /// Runs one create over `steps`; checks every call under the key was byte-identical.
    async fn charge_with(steps: Vec<Step>) -> (PspOutcome, usize) {
        let psp = scripted(steps);
        let outcome = psp.create_charge(&request(), Duration::from_secs(10)).await;
        let calls = calls(&psp);
        assert!(calls.windows(2).all(|pair| pair[0] == pair[1]), "{calls:?}");
        (outcome, calls.len())
    }

    fn unknown(reason: &str) -> PspOutcome {
        PspOutcome::Unknown {
            reason: reason.into(),
        }
    }

    #[tokio::test]
    async fn a_charge_sends_a_pure_function_of_the_request_and_every_resend_is_identical() {
        let psp = scripted([rate_limited(), ours("successful", None)]);
        let outcome = psp.create_charge(&request(), Duration::from_secs(10)).await;
        assert_eq!(
            outcome,
            PspOutcome::Approved {
                provider_payment_id: CHARGE.into()
            }
        );
        let expected = WireCall {
            method: "POST",
            path: "/charges".into(),
            query: Vec::new(),
            headers: pairs(&[
                ("Authorization", BASIC),
                ("Omise-Version", "2019-05-29"),
                ("Idempotency-Key", &format!("payonce-charge-{PAY}")),
            ]),
            body: WireBody::Form(pairs(&[
                ("amount", "100000"),
                ("currency", "thb"),
                ("card", TOKEN),
                ("capture", "true"),
                ("description", PAY),
                ("metadata[payment_id]", PAY),
            ])),
        };
        assert_eq!(calls(&psp), vec![expected.clone(), expected.clone()]);
        // A later create of the same request (a taken-over attempt) is the same bytes again.
        let again = scripted([ours("successful", None)]);
        again
            .create_charge(&request(), Duration::from_secs(5))
            .await;
        assert_eq!(calls(&again), vec![expected]);
        // Yen goes in whole yen, lowercase like every currency.
        let yen = scripted([ours("successful", None)]);
        let mut request = request();
        request.amount = 300;
        request.currency = Currency::Jpy;
        yen.create_charge(&request, Duration::from_secs(5)).await;
        let WireBody::Form(form) = &calls(&yen)[0].body else {
            panic!("a form")
        };
        assert_eq!(
            form[..2],
            pairs(&[("amount", "300"), ("currency", "jpy")])[..]
        );
    }

    #[test]
    fn the_authorization_is_basic_with_the_secret_key_and_an_empty_password() {
        let psp = scripted([]);
        let call = psp.charge_call(&request());
        assert_eq!(call.header("authorization"), Some(BASIC));
        let encoded = BASIC.strip_prefix("Basic ").unwrap();
        assert_eq!(
            b64::decode(encoded, Alphabet::Standard).unwrap(),
            b"skey_test_scripted:"
        );
        let other = OmisePsp::with_transport(
            Scripted::new([]),
            "omise",
            "skey_5dqz",
            Duration::from_secs(1),
        );
        // base64("skey_5dqz:"), computed independently.
        assert_eq!(
            other.charge_call(&request()).header("Authorization"),
            Some("Basic c2tleV81ZHF6Og==")
        );
    }

    #[test]
    fn the_secret_never_shows_in_debug() {
        let config = OmiseConfig::new(SECRET);
        assert_eq!(config.base_url, "https://api.omise.co");
        assert_eq!(config.provider_name, "omise");
        let config = config.with_base_url("http://127.0.0.1:4242/");
        assert_eq!(config.base_url, "http://127.0.0.1:4242");
        let shown = format!("{config:?}");
        assert!(
            !shown.contains(SECRET) && shown.contains("<redacted>"),
            "{shown}"
        );
        let psp = OmisePsp::new(config).unwrap();
        assert_eq!(psp.name(), "omise");
        let scripted = scripted([]);
        let call = scripted.charge_call(&request());
        let encoded = BASIC.strip_prefix("Basic ").unwrap();
        for shown in [
            format!("{psp:?}"),
            format!("{scripted:?}"),
            format!("{call:?}"),
        ] {
            assert!(!shown.contains(SECRET), "{shown}");
            assert!(!shown.contains(encoded), "{shown}");
        }
    }

    #[tokio::test]
    async fn charge_objects_map_to_outcome_classes() {
        let declined = |code: &str| PspOutcome::Declined {
            provider_payment_id: Some(CHARGE.into()),
            decline_code: code.into(),
        };
        let cases = [
            (
                ours("successful", None),
                PspOutcome::Approved {
                    provider_payment_id: CHARGE.into(),
                },
            ),
            (
                ours("failed", Some("insufficient_fund")),
                declined("insufficient_fund"),
            ),
            (
                ours("failed", Some("payment_rejected")),
                declined("payment_rejected"),
            ),
            (ours("failed", None), declined("failed")),
            (ours("expired", None), declined("expired")),
            (ours("expired", Some("timeout")), declined("timeout")),
            (ours("reversed", None), declined("reversed")),
            // 3-D Secure: waits for the customer, whom payonce never redirects.
            (
                ours("pending", None),
                unknown(&format!("charge {CHARGE} is pending")),
            ),
            (
                ours("unheard_of", None),
                unknown(&format!("charge {CHARGE} is unheard_of")),
            ),
            (
                Ok(WireReply {
                    status: 200,
                    body: b"<html>".to_vec(),
                }),
                unknown("unreadable PSP answer (200): expected value at line 1 column 1"),
            ),
            (
                reply(200, json!({"object": "list", "data": []})),
                unknown("PSP answered 200 with neither a charge nor an error"),
            ),
        ];
        for (step, expected) in cases {
            assert_eq!(charge_with(vec![step]).await, (expected, 1));
        }
        // A successful charge without an id cannot be recorded: unknown.
        let mut no_id = charge(CHARGE, "successful", None, PAY);
        no_id.as_object_mut().unwrap().remove("id");
        assert_eq!(
            charge_with(vec![reply(200, no_id)]).await,
            (unknown("charge <no id> is successful"), 1)
        );
    }

    #[tokio::test]
    async fn error_answers_map_to_outcome_classes() {
        // The payment method is invalid: rejected, nothing charged.
        for (status, code) in [
            (400, "invalid_card"),
            (400, "invalid_card_token"),
            (400, "missing_card"),
            (400, "brand_not_supported"),
            (404, "not_found"),
            (422, "invalid_card"),
        ] {
            assert_eq!(
                charge_with(vec![omise_error(status, code)]).await,
                (
                    PspOutcome::Rejected {
                        message: format!("scripted {code}")
                    },
                    1
                ),
                "{status} {code}"
            );
        }
        // Validation of the request itself: refused, nothing charged.
        for code in ["invalid_charge", "invalid_amount", "failed_multi_currency"] {
            assert_eq!(
                charge_with(vec![omise_error(400, code)]).await,
                (PspOutcome::Refused { code: code.into() }, 1),
                "{code}"
            );
        }
        // Anything else is unknown: never a guess that releases the order.
        for (status, code) in [
            (400, "bad_request"),
            (400, "backend_error"),
            (400, "failed_fraud_check"),
            (400, "something_new"),
            (500, "internal_error"),
            (503, "invalid_charge"),
            (500, "invalid_card"),
        ] {
            assert_eq!(
                charge_with(vec![omise_error(status, code)]).await,
                (unknown(&format!("PSP answered {status} {code}")), 1),
                "{status} {code}"
            );
        }
        assert_eq!(
            charge_with(vec![Ok(WireReply {
                status: 502,
                body: b"Bad Gateway".to_vec()
            })])
            .await,
            (
                unknown("unreadable PSP answer (502): expected value at line 1 column 1"),
                1
            )
        );
        // Our credentials refused before anything else answered: not sent (and the alarm).
        for status in [401, 403] {
            assert_eq!(
                charge_with(vec![omise_error(status, "authentication_failure")]).await,
                (
                    PspOutcome::NotSent {
                        reason: format!("the PSP refused our credentials ({status})")
                    },
                    1
                )
            );
        }
        assert_eq!(
            charge_with(vec![Ok(WireReply {
                status: 401,
                body: Vec::new()
            })])
            .await,
            (
                PspOutcome::NotSent {
                    reason: "the PSP refused our credentials (401)".into()
                },
                1
            )
        );
    }

    #[tokio::test]
    async fn used_token_is_unknown_even_on_its_own_and_after_a_lost_answer() {
        let used = "PSP answered 400 used_token: the card token was already used, maybe by an earlier call under this key";
        // On its own (the adapter cannot know whether an earlier call under the key consumed it).
        assert_eq!(
            charge_with(vec![omise_error(400, "used_token")]).await,
            (unknown(used), 1)
        );
        // The first create connected and lost its answer (Omise may have charged); the re-send
        // with the same single-use token is refused as used: still unknown, never rejected.
        let psp = scripted([after_connect(), omise_error(400, "used_token")]);
        assert_eq!(
            psp.create_charge(&request(), Duration::from_secs(10)).await,
            unknown("scripted: cut")
        );
        assert_eq!(
            psp.create_charge(&request(), Duration::from_secs(10)).await,
            unknown(used)
        );
        let calls = calls(&psp);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0], calls[1]);
        // After a busy answer, the same.
        assert_eq!(
            charge_with(vec![busy(), omise_error(400, "used_token")]).await,
            (unknown(used), 2)
        );
    }

    #[tokio::test]
    async fn busy_answers_are_retried_twice_then_unknown() {
        assert_eq!(
            charge_with(vec![busy(), rate_limited(), ours("successful", None)]).await,
            (
                PspOutcome::Approved {
                    provider_payment_id: CHARGE.into()
                },
                3
            )
        );
        assert_eq!(
            charge_with(vec![rate_limited(), rate_limited(), rate_limited()]).await,
            (unknown("PSP answered 429 rate_limit"), 3)
        );
        assert_eq!(
            charge_with(vec![busy(), busy(), busy()]).await,
            (unknown("PSP answered 409 conflict"), 3)
        );
        // A request-only refusal after a busy answer is still a refusal: the re-send repeated
        // the same bytes, validated alike.
        assert_eq!(
            charge_with(vec![rate_limited(), omise_error(400, "invalid_charge")]).await,
            (
                PspOutcome::Refused {
                    code: "invalid_charge".into()
                },
                2
            )
        );
        // Too little time for a retry: the busy answer is the last word.
        let psp = scripted([rate_limited()]);
        assert_eq!(
            psp.create_charge(&request(), Duration::from_millis(500))
                .await,
            unknown("PSP answered 429 rate_limit")
        );
        assert_eq!(calls(&psp).len(), 1);
    }

    #[tokio::test]
    async fn credentials_refused_after_a_busy_answer_are_unknown() {
        assert_eq!(
            charge_with(vec![busy(), omise_error(401, "authentication_failure")]).await,
            (unknown("the PSP refused our credentials (401)"), 2)
        );
        assert_eq!(
            charge_with(vec![rate_limited(), omise_error(403, "forbidden")]).await,
            (unknown("the PSP refused our credentials (403)"), 2)
        );
    }

    #[tokio::test]
    async fn a_charge_that_never_connected_was_not_sent_unless_something_answered_before() {
        assert_eq!(
            charge_with(vec![not_connected()]).await,
            (
                PspOutcome::NotSent {
                    reason: "scripted: refused".into()
                },
                1
            )
        );
        assert_eq!(
            charge_with(vec![after_connect()]).await,
            (unknown("scripted: cut"), 1)
        );
        assert_eq!(
            charge_with(vec![busy(), not_connected()]).await,
            (unknown("scripted: refused"), 2)
        );
    }

    fn search_page(charges: Vec<Value>, page: u64, total_pages: u64) -> Step {
        let total = charges.len();
        reply(
            200,
            json!({
                "object": "search",
                "order": "chronological",
                "scope": "charge",
                "query": PAY,
                "filters": {},
                "page": page,
                "per_page": 30,
                "total_pages": total_pages,
                "total": total,
                "data": charges,
            }),
        )
    }

    async fn lookup_with(steps: Vec<Step>) -> Result<PspLookup, PspError> {
        scripted(steps).lookup(PAY).await
    }

    #[tokio::test]
    async fn a_lookup_searches_by_payment_id_and_reads_each_state() {
        let psp = scripted([search_page(
            vec![charge(CHARGE, "successful", None, PAY)],
            1,
            1,
        )]);
        assert_eq!(
            psp.lookup(PAY).await.unwrap(),
            PspLookup::Succeeded {
                amount: Some(CheckedAmount {
                    minor: 100000,
                    currency: "thb".into()
                }),
                provider_payment_id: CHARGE.into()
            }
        );
        assert_eq!(
            calls(&psp),
            vec![WireCall {
                method: "GET",
                path: "/search".into(),
                query: pairs(&[("scope", "charge"), ("query", PAY), ("page", "1")]),
                headers: pairs(&[("Authorization", BASIC), ("Omise-Version", "2019-05-29")]),
                body: WireBody::Empty,
            }]
        );
        let declined = |code: &str| PspLookup::Declined {
            amount: Some(CheckedAmount {
                minor: 100000,
                currency: "thb".into(),
            }),
            provider_payment_id: CHARGE.into(),
            decline_code: code.into(),
        };
        let pending = PspLookup::Pending {
            provider_payment_id: CHARGE.into(),
        };
        let cases = [
            (
                "failed",
                Some("stolen_or_lost_card"),
                declined("stolen_or_lost_card"),
            ),
            ("expired", None, declined("expired")),
            ("reversed", None, declined("reversed")),
            ("pending", None, pending.clone()),
            // A status unknown here is not final: pending, never "not found".
            ("unheard_of", None, pending),
        ];
        for (status, code, expected) in cases {
            assert_eq!(
                lookup_with(vec![search_page(
                    vec![charge(CHARGE, status, code, PAY)],
                    1,
                    1
                )])
                .await
                .unwrap(),
                expected,
                "{status}"
            );
        }
        assert_eq!(
            lookup_with(vec![search_page(Vec::new(), 1, 0)])
                .await
                .unwrap(),
            PspLookup::NotFound
        );
    }

    #[tokio::test]
    async fn a_lookup_matches_our_payment_id_exactly() {
        // The text query also finds other attempts' charges: only ours count.
        let other = "pay_0123456789abcdef0123456789abcdee";
        let mut foreign = charge("chrg_test_other", "successful", None, other);
        foreign["description"] = json!(format!("see {PAY}"));
        assert_eq!(
            lookup_with(vec![search_page(vec![foreign], 1, 1)])
                .await
                .unwrap(),
            PspLookup::NotFound
        );
        // Metadata names another attempt while the description names ours: not ours.
        let mut mixed = charge("chrg_test_mixed", "successful", None, other);
        mixed["description"] = json!(PAY);
        assert_eq!(
            lookup_with(vec![search_page(vec![mixed], 1, 1)])
                .await
                .unwrap(),
            PspLookup::NotFound
        );
        // No metadata at all: our description is enough.
        let mut bare = charge(CHARGE, "successful", None, PAY);
        bare.as_object_mut().unwrap().remove("metadata");
        assert_eq!(
            lookup_with(vec![search_page(vec![bare], 1, 1)])
                .await
                .unwrap(),
            PspLookup::Succeeded {
                amount: Some(CheckedAmount {
                    minor: 100000,
                    currency: "thb".into()
                }),
                provider_payment_id: CHARGE.into()
            }
        );
        // Not a charge.
        let mut refund = charge(CHARGE, "successful", None, PAY);
        refund["object"] = json!("refund");
        assert_eq!(
            lookup_with(vec![search_page(vec![refund], 1, 1)])
                .await
                .unwrap(),
            PspLookup::NotFound
        );
    }

    #[tokio::test]
    async fn a_lookup_reads_every_page_and_prefers_the_strongest_word() {
        let psp = scripted([
            search_page(
                vec![
                    charge("chrg_test_1", "failed", Some("insufficient_fund"), PAY),
                    charge("chrg_test_x", "successful", None, "pay_other"),
                ],
                1,
                2,
            ),
            search_page(vec![charge("chrg_test_2", "successful", None, PAY)], 2, 2),
        ]);
        assert_eq!(
            psp.lookup(PAY).await.unwrap(),
            PspLookup::Succeeded {
                amount: Some(CheckedAmount {
                    minor: 100000,
                    currency: "thb".into()
                }),
                provider_payment_id: "chrg_test_2".into()
            }
        );
        let pages: Vec<_> = calls(&psp)
            .iter()
            .map(|call| call.query[2].clone())
            .collect();
        assert_eq!(pages, pairs(&[("page", "1"), ("page", "2")]));
        // Pending beats declined; declined (incl. expired) beats nothing.
        assert_eq!(
            lookup_with(vec![search_page(
                vec![
                    charge("chrg_test_1", "expired", None, PAY),
                    charge("chrg_test_2", "pending", None, PAY),
                    charge("chrg_test_3", "failed", None, PAY),
                ],
                1,
                1
            )])
            .await
            .unwrap(),
            PspLookup::Pending {
                provider_payment_id: "chrg_test_2".into()
            }
        );
    }

    #[tokio::test]
    async fn a_payment_whose_charge_id_is_stored_is_retrieved_by_it_not_searched() {
        // GIVEN a payment holding its Omise charge id
        let mut payment =
            crate::domain::payment::test_payment(crate::domain::PaymentStatus::Authorized, None);
        payment.payment_id = PAY.into();
        payment.provider_payment_id = Some(CHARGE.into());
        let psp = scripted([reply(200, authorise_only("expired", true))]);
        // WHEN reconcile looks it up
        let found = psp.lookup_payment(&payment).await.unwrap();
        // THEN one exact retrieve, no search, and what the charge says
        assert!(matches!(found, PspLookup::Canceled { .. }), "{found:?}");
        let sent = calls(&psp);
        assert_eq!(sent.len(), 1);
        assert_eq!(
            (sent[0].method, sent[0].path.as_str()),
            ("GET", &*format!("/charges/{CHARGE}"))
        );
        // AND a retrieve that fails falls back to the search
        let psp = scripted([
            after_connect(),
            search_page(vec![authorise_only("pending", true)], 1, 1),
        ]);
        assert!(matches!(
            psp.lookup_payment(&payment).await.unwrap(),
            PspLookup::Authorized { .. }
        ));
        assert_eq!(calls(&psp)[1].path, "/search");
    }

    #[tokio::test]
    async fn a_lookup_fails_rather_than_guessing() {
        let reason = |r: Result<PspLookup, PspError>| r.unwrap_err().reason;
        assert_eq!(
            reason(lookup_with(vec![omise_error(500, "internal_error")]).await),
            "search answered 500"
        );
        assert_eq!(
            reason(lookup_with(vec![not_connected()]).await),
            "scripted: refused"
        );
        assert_eq!(
            reason(lookup_with(vec![after_connect()]).await),
            "scripted: cut"
        );
        assert_eq!(
            reason(lookup_with(vec![reply(200, json!({"object": "search"}))]).await),
            "the search answer has no data"
        );
        let mut no_id = charge(CHARGE, "successful", None, PAY);
        no_id.as_object_mut().unwrap().remove("id");
        assert_eq!(
            reason(lookup_with(vec![search_page(vec![no_id], 1, 1)]).await),
            "a charge of ours has no id"
        );
        // More pages than a lookup reads, none with ours: no proof it is not there.
        let psp = scripted((1..=5).map(|page| {
            search_page(
                vec![charge("chrg_test_x", "successful", None, "pay_other")],
                page,
                9,
            )
        }));
        assert_eq!(
            psp.lookup(PAY).await.unwrap_err().reason,
            format!("more than 5 pages of search results for {PAY}: the lookup gave up")
        );
        assert_eq!(calls(&psp).len(), 5);
    }

    #[tokio::test]
    async fn the_fence_is_unprovable_and_cancel_is_refused_without_a_call() {
        let psp = scripted([]);
        assert_eq!(psp.fence(&request()).await.unwrap(), Fence::Unprovable);
        let error = psp.cancel(CHARGE).await.unwrap_err();
        assert!(error.reason.contains(CHARGE), "{}", error.reason);
        assert!(calls(&psp).is_empty());
    }

    const REFUND_ID: &str = "rfd_0123456789abcdef0123456789abcdef_1";

    fn refund_request() -> RefundRequest {
        RefundRequest {
            refund_id: REFUND_ID.into(),
            payment_id: PAY.into(),
            provider_payment_id: CHARGE.into(),
            amount: 10000,
            currency: Currency::Thb,
            reason: Some(crate::domain::RefundReason::RequestedByCustomer),
            idempotency_key: format!("payonce-refund-{PAY}-1"),
            resend: false,
            provider_refund_id: None,
            captured: 0,
        }
    }

    /// A refund as Omise serialises it (omise-php's refunds-post fixture).
    fn refund_object(id: &str, refund_id: Option<&str>, status: Option<&str>) -> Value {
        let metadata = match refund_id {
            Some(refund_id) => json!({"refund_id": refund_id, "payment_id": PAY}),
            None => json!({}),
        };
        let mut refund = json!({
            "object": "refund",
            "id": id,
            "location": format!("/charges/{CHARGE}/refunds/{id}"),
            "livemode": false,
            "amount": 10000,
            "currency": "thb",
            "charge": CHARGE,
            "transaction": "trxn_test_4yqmv79fzpy0gmz5mmq",
            "voided": false,
            "metadata": metadata,
            "funding_amount": 10000,
            "funding_currency": "thb",
            "created_at": "2015-01-16T07:23:45Z",
        });
        if let Some(status) = status {
            refund["status"] = json!(status);
        }
        refund
    }

    /// A page of `GET /charges/{id}/refunds` (omise-go's refunds-get fixture).
    fn refund_list(refunds: Vec<Value>, offset: u64, total: u64) -> Step {
        reply(
            200,
            json!({
                "object": "list",
                "from": "1970-01-01T00:00:00+00:00",
                "to": "2015-01-16T07:24:51+00:00",
                "offset": offset,
                "limit": 100,
                "total": total,
                "order": "chronological",
                "location": format!("/charges/{CHARGE}/refunds"),
                "data": refunds,
            }),
        )
    }

    fn empty_list() -> Step {
        refund_list(Vec::new(), 0, 0)
    }

    fn list_call(offset: u64) -> WireCall {
        WireCall {
            method: "GET",
            path: format!("/charges/{CHARGE}/refunds"),
            query: pairs(&[
                ("limit", "100"),
                ("offset", &offset.to_string()),
                ("order", "chronological"),
            ]),
            headers: pairs(&[("Authorization", BASIC), ("Omise-Version", "2019-05-29")]),
            body: WireBody::Empty,
        }
    }

    /// Runs one refund create over `steps` (the first answers the list of refunds).
    async fn refund_with(steps: Vec<Step>) -> (RefundOutcome, usize) {
        let psp = scripted(steps);
        let outcome = psp
            .create_refund(&refund_request(), Duration::from_secs(10))
            .await;
        (outcome, calls(&psp).len())
    }

    fn failed(code: &str) -> RefundOutcome {
        RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: None,
            code: code.into(),
        })
    }

    fn refund_unknown(reason: &str) -> RefundOutcome {
        RefundOutcome::Unknown {
            reason: reason.into(),
        }
    }

    const RFND: &str = "rfnd_test_4yqmv79ahghsiz23y3c";

    #[tokio::test]
    async fn a_refund_looks_for_ours_first_then_posts_a_pure_function_of_the_request() {
        let psp = scripted([
            refund_list(vec![refund_object("rfnd_test_other", None, None)], 0, 1),
            rate_limited(),
            reply(200, refund_object(RFND, Some(REFUND_ID), Some("closed"))),
        ]);
        let outcome = psp
            .create_refund(&refund_request(), Duration::from_secs(10))
            .await;
        assert_eq!(
            outcome,
            RefundOutcome::Answered(RefundSettlement::Succeeded {
                provider_refund_id: RFND.into()
            })
        );
        let post = WireCall {
            method: "POST",
            path: format!("/charges/{CHARGE}/refunds"),
            query: Vec::new(),
            headers: pairs(&[
                ("Authorization", BASIC),
                ("Omise-Version", "2019-05-29"),
                ("Idempotency-Key", &format!("payonce-refund-{PAY}-1")),
            ]),
            body: WireBody::Form(pairs(&[
                ("amount", "10000"),
                ("metadata[refund_id]", REFUND_ID),
                ("metadata[payment_id]", PAY),
            ])),
        };
        assert_eq!(calls(&psp), vec![list_call(0), post.clone(), post]);
    }

    #[tokio::test]
    async fn a_refund_already_on_the_charge_is_answered_without_posting_again() {
        // A re-send after a lost answer: Omise's refund idempotency is undocumented, so the
        // refund that exists answers, and no second refund is posted.
        let (outcome, sent) = refund_with(vec![refund_list(
            vec![
                refund_object("rfnd_test_other", Some("rfd_other"), None),
                refund_object(RFND, Some(REFUND_ID), None),
            ],
            0,
            2,
        )])
        .await;
        assert_eq!(
            (outcome, sent),
            (
                RefundOutcome::Answered(RefundSettlement::Succeeded {
                    provider_refund_id: RFND.into()
                }),
                1
            )
        );
    }

    #[tokio::test]
    async fn a_refund_whose_list_fails_is_not_sent() {
        for step in [
            not_connected(),
            after_connect(),
            omise_error(500, "internal_error"),
            omise_error(401, "authentication_failure"),
        ] {
            let (outcome, sent) = refund_with(vec![step]).await;
            assert!(
                matches!(&outcome, RefundOutcome::NotSent { reason } if reason.starts_with("the charge's refunds could not be listed")),
                "{outcome:?}"
            );
            assert_eq!(sent, 1);
        }
        // A provider id that is no Omise charge id is never put in a path.
        let psp = scripted([]);
        let mut request = refund_request();
        request.provider_payment_id = "chrg_1/../../customers".into();
        assert!(matches!(
            psp.create_refund(&request, Duration::from_secs(10)).await,
            RefundOutcome::NotSent { .. }
        ));
        assert!(psp.lookup_refund("chrg_1?x=1", REFUND_ID).await.is_err());
        assert!(calls(&psp).is_empty());
    }

    #[tokio::test]
    async fn refund_answers_map_to_outcome_classes() {
        let object =
            |status: Option<&str>| reply(200, refund_object(RFND, Some(REFUND_ID), status));
        let succeeded = RefundOutcome::Answered(RefundSettlement::Succeeded {
            provider_refund_id: RFND.into(),
        });
        assert_eq!(
            refund_with(vec![empty_list(), object(None)]).await,
            (succeeded.clone(), 2)
        );
        assert_eq!(
            refund_with(vec![empty_list(), object(Some("closed"))]).await,
            (succeeded, 2)
        );
        // An undocumented status is not taken as final.
        assert_eq!(
            refund_with(vec![empty_list(), object(Some("pending"))]).await,
            (
                RefundOutcome::Answered(RefundSettlement::Pending {
                    provider_refund_id: RFND.into()
                }),
                2
            )
        );
        // Refused for good: nothing was refunded.
        for (status, code) in [
            (400, "failed_refund"),
            (400, "invalid_amount"),
            (404, "not_found"),
        ] {
            assert_eq!(
                refund_with(vec![empty_list(), omise_error(status, code)]).await,
                (failed(code), 2),
                "{code}"
            );
        }
        // Unknown.
        for (status, code) in [
            (400, "bad_request"),
            (400, "backend_error"),
            (400, "something_new"),
            (500, "internal_error"),
            (503, "failed_refund"),
        ] {
            assert_eq!(
                refund_with(vec![empty_list(), omise_error(status, code)]).await,
                (refund_unknown(&format!("PSP answered {status} {code}")), 2),
                "{status} {code}"
            );
        }
        assert_eq!(
            refund_with(vec![
                empty_list(),
                Ok(WireReply {
                    status: 200,
                    body: b"<html>".to_vec()
                })
            ])
            .await,
            (
                refund_unknown("unreadable PSP answer (200): expected value at line 1 column 1"),
                2
            )
        );
        let mut no_id = refund_object(RFND, Some(REFUND_ID), None);
        no_id.as_object_mut().unwrap().remove("id");
        assert_eq!(
            refund_with(vec![empty_list(), reply(200, no_id)]).await,
            (refund_unknown("the PSP answered a refund without an id"), 2)
        );
        // Our credentials refused before anything else answered: not sent.
        for status in [401, 403] {
            assert_eq!(
                refund_with(vec![
                    empty_list(),
                    omise_error(status, "authentication_failure")
                ])
                .await,
                (
                    RefundOutcome::NotSent {
                        reason: format!("the PSP refused our credentials ({status})")
                    },
                    2
                )
            );
        }
    }

    #[tokio::test]
    async fn busy_refund_answers_are_retried_then_unknown_and_later_words_are_weighed() {
        assert_eq!(
            refund_with(vec![
                empty_list(),
                busy(),
                rate_limited(),
                reply(200, refund_object(RFND, Some(REFUND_ID), None))
            ])
            .await,
            (
                RefundOutcome::Answered(RefundSettlement::Succeeded {
                    provider_refund_id: RFND.into()
                }),
                4
            )
        );
        assert_eq!(
            refund_with(vec![
                empty_list(),
                rate_limited(),
                rate_limited(),
                rate_limited()
            ])
            .await,
            (refund_unknown("PSP answered 429 rate_limit"), 4)
        );
        // A refusal after a busy answer may be caused by our own first request (e.g. "more than
        // is left" once it refunded): unknown, for the lookup to settle.
        assert_eq!(
            refund_with(vec![
                empty_list(),
                busy(),
                omise_error(400, "invalid_amount")
            ])
            .await,
            (
                refund_unknown("PSP answered 400 invalid_amount after an earlier answer"),
                3
            )
        );
        // Credentials refused after a busy answer: unknown.
        assert_eq!(
            refund_with(vec![
                empty_list(),
                busy(),
                omise_error(401, "authentication_failure")
            ])
            .await,
            (refund_unknown("the PSP refused our credentials (401)"), 3)
        );
    }

    #[tokio::test]
    async fn a_refund_post_that_never_connected_was_not_sent_unless_something_answered_before() {
        assert_eq!(
            refund_with(vec![empty_list(), not_connected()]).await,
            (
                RefundOutcome::NotSent {
                    reason: "scripted: refused".into()
                },
                2
            )
        );
        assert_eq!(
            refund_with(vec![empty_list(), after_connect()]).await,
            (refund_unknown("scripted: cut"), 2)
        );
        assert_eq!(
            refund_with(vec![empty_list(), rate_limited(), not_connected()]).await,
            (refund_unknown("scripted: refused"), 3)
        );
    }

    #[tokio::test]
    async fn a_refund_lookup_lists_the_charge_refunds_page_by_page() {
        let many: Vec<Value> = (0..100)
            .map(|n| refund_object(&format!("rfnd_test_{n}"), Some(&format!("rfd_x_{n}")), None))
            .collect();
        let psp = scripted([
            refund_list(many, 0, 102),
            refund_list(
                vec![
                    refund_object("rfnd_test_100", None, None),
                    refund_object(RFND, Some(REFUND_ID), Some("pending")),
                ],
                100,
                102,
            ),
        ]);
        assert_eq!(
            psp.lookup_refund(CHARGE, REFUND_ID).await.unwrap(),
            Some(RefundSettlement::Pending {
                provider_refund_id: RFND.into()
            })
        );
        assert_eq!(calls(&psp), vec![list_call(0), list_call(100)]);
        // A short page (Omise capping `limit` lower) still pages on by what came.
        let psp = scripted([
            refund_list(vec![refund_object("rfnd_test_a", None, None)], 0, 2),
            refund_list(vec![refund_object(RFND, Some(REFUND_ID), None)], 1, 2),
        ]);
        assert_eq!(
            psp.lookup_refund(CHARGE, REFUND_ID).await.unwrap(),
            Some(RefundSettlement::Succeeded {
                provider_refund_id: RFND.into()
            })
        );
        assert_eq!(calls(&psp), vec![list_call(0), list_call(1)]);
    }

    #[tokio::test]
    async fn a_refund_lookup_prefers_the_strongest_word_finds_none_or_fails() {
        let psp = scripted([refund_list(
            vec![
                refund_object("rfnd_test_1", Some(REFUND_ID), Some("pending")),
                refund_object("rfnd_test_2", Some(REFUND_ID), Some("closed")),
            ],
            0,
            2,
        )]);
        assert_eq!(
            psp.lookup_refund(CHARGE, REFUND_ID).await.unwrap(),
            Some(RefundSettlement::Succeeded {
                provider_refund_id: "rfnd_test_2".into()
            })
        );
        let psp = scripted([refund_list(
            vec![refund_object(RFND, Some("rfd_other"), None)],
            0,
            1,
        )]);
        assert_eq!(psp.lookup_refund(CHARGE, REFUND_ID).await.unwrap(), None);
        let psp = scripted([empty_list()]);
        assert_eq!(psp.lookup_refund(CHARGE, REFUND_ID).await.unwrap(), None);

        let reason = |steps: Vec<Step>| async {
            scripted(steps)
                .lookup_refund(CHARGE, REFUND_ID)
                .await
                .unwrap_err()
                .reason
        };
        assert_eq!(
            reason(vec![omise_error(404, "not_found")]).await,
            "refund list answered 404"
        );
        assert_eq!(reason(vec![not_connected()]).await, "scripted: refused");
        assert_eq!(
            reason(vec![reply(200, json!({"object": "list"}))]).await,
            "the refund list has no data"
        );
        // Ten full pages without ours, and more to come: no proof it is not there.
        let psp = scripted((0..10).map(|page| {
            refund_list(
                (0..100)
                    .map(|n| refund_object(&format!("rfnd_test_{page}_{n}"), None, None))
                    .collect(),
                page * 100,
                5000,
            )
        }));
        assert_eq!(
            psp.lookup_refund(CHARGE, REFUND_ID)
                .await
                .unwrap_err()
                .reason,
            format!("more than 1000 refunds of {CHARGE}: the lookup gave up")
        );
        assert_eq!(calls(&psp).len(), 10);
    }

    #[tokio::test]
    async fn every_call_carries_the_key_and_version_and_only_creates_an_idempotency_key() {
        let psp = scripted([
            ours("successful", None),
            search_page(Vec::new(), 1, 0),
            empty_list(),
            reply(200, refund_object(RFND, Some(REFUND_ID), None)),
            empty_list(),
        ]);
        psp.create_charge(&request(), Duration::from_secs(10)).await;
        psp.lookup(PAY).await.unwrap();
        psp.create_refund(&refund_request(), Duration::from_secs(10))
            .await;
        psp.lookup_refund(CHARGE, REFUND_ID).await.unwrap();
        let headers: Vec<_> = calls(&psp)
            .iter()
            .map(|call| {
                (
                    call.method,
                    call.header("authorization").map(str::to_owned),
                    call.header("omise-version").map(str::to_owned),
                    call.header("idempotency-key").map(str::to_owned),
                )
            })
            .collect();
        let basic = || Some(BASIC.to_owned());
        let version = || Some("2019-05-29".to_owned());
        assert_eq!(
            headers,
            vec![
                (
                    "POST",
                    basic(),
                    version(),
                    Some(format!("payonce-charge-{PAY}"))
                ),
                ("GET", basic(), version(), None),
                ("GET", basic(), version(), None),
                (
                    "POST",
                    basic(),
                    version(),
                    Some(format!("payonce-refund-{PAY}-1"))
                ),
                ("GET", basic(), version(), None),
            ]
        );
    }
}
