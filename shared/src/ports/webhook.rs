//! PSP webhooks: verifying a signature and reading a verified event.

use super::psp::CheckedAmount;
use crate::domain::RefundSettlement;

/// Why a webhook's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No signature header (400).
    #[error("the signature header is missing")]
    Missing,
    /// The header does not parse (400).
    #[error("the signature header cannot be parsed")]
    Malformed,
    /// The header parses, but no signature matches (401).
    #[error("no signature matches")]
    NoValidSignature,
    /// The signed timestamp is outside the tolerance (401).
    #[error("the signature timestamp is outside the tolerance")]
    Stale,
    /// The key to verify with could not be had right now (PayPal's certificate, from an allowed
    /// host that did not answer): 503, so the PSP delivers again.
    #[error("the signing key could not be fetched right now")]
    KeyUnavailable,
}

/// A verified PSP event, as payonce reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PspEvent {
    /// The PSP's event id (the dedup key).
    pub event_id: String,
    /// The PSP's event type.
    pub kind: String,
    /// Our attempt id from the event's metadata, if the event concerns one of our attempts.
    pub payment_id: Option<String>,
    /// What the event says about that attempt, if it is a type payonce applies.
    pub settlement: Option<crate::domain::Settlement>,
    /// What the event says about one of our refunds (matched by our refund id in its metadata).
    pub refund: Option<RefundEvent>,
    /// The event says the charge's refunds changed without naming one of ours (Stripe's
    /// `charge.refunded`): the payment's pending refunds are looked up again.
    pub refunds_changed: bool,
    /// What the event's object says was charged (or refunded, for a refund event), in minor
    /// units, and in which currency (lowercase ISO code), where the PSP reports them: checked
    /// against our payment (or refund) before anything is applied.
    pub amount: Option<CheckedAmount>,
    /// Whether the event comes from the PSP's live mode, where the PSP reports it: an event of
    /// the other mode is never applied.
    pub livemode: Option<bool>,
    /// The connected account the event is for, where the PSP names one (Stripe Connect's
    /// `account`): payonce charges on its own account only, so such an event is never applied.
    pub account: Option<String>,
}

/// A webhook's word on one of our refunds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundEvent {
    /// Our refund id, from the refund's metadata.
    pub refund_id: String,
    /// What the refund object says.
    pub settlement: RefundSettlement,
}

/// A PSP's webhook scheme: verification of the raw body, then parsing.
#[async_trait::async_trait]
pub trait WebhookScheme: Send + Sync {
    /// The provider name in `/webhooks/{provider}`.
    fn provider(&self) -> &str;
    /// Fetches what [`WebhookScheme::verify`] needs and the request names (PayPal's certificate,
    /// from an allowed origin only), before it is called; by default nothing.
    async fn fetch_keys(
        &self,
        headers: &lambda_http::http::HeaderMap,
    ) -> Result<(), SignatureError> {
        let _ = headers;
        Ok(())
    }
    /// Verifies the raw body against the request's signature headers at `now_s`.
    fn verify(
        &self,
        headers: &lambda_http::http::HeaderMap,
        body: &[u8],
        now_s: i64,
    ) -> Result<(), SignatureError>;
    /// Parses a verified body.
    fn parse(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error>;
}
