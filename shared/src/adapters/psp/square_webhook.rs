//! Square's webhook signature: `x-square-hmacsha256-signature` holds the standard base64 of
//! HMAC-SHA256, keyed with the subscription's signature key (its text as UTF-8 bytes), over the
//! subscription's notification URL followed by the raw body. The URL is ours, from
//! configuration, byte for byte as registered with Square: never one a request names. Square
//! signs no timestamp, so there is no staleness check; replays are harmless through event
//! dedup (`event_id`) and the cross-checks every settlement passes. The legacy
//! `x-square-signature` (HMAC-SHA1 over the same string) is not accepted.
//!
//! Errors map as for the other schemes: no header → [`SignatureError::Missing`] (400); a header
//! that is not text or not base64 → `Malformed` (400); a signature that does not match →
//! `NoValidSignature` (401). The comparison is in constant time.
//!
//! [`SquareWebhooks`] is the scheme: this verifier, then [`parse_event`], the one reading of
//! Square's payment and refund objects (the adapter reads its answers with it too).

use super::b64::{self, Alphabet};
use crate::domain::{CancellationReason, RefundSettlement, Settlement};
use crate::ports::{PspEvent, RefundEvent, SignatureError, WebhookScheme};
use hmac::{Hmac, KeyInit, Mac};
use lambda_http::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use sha2::Sha256;

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-square-hmacsha256-signature";

/// Why a Square signature key or notification URL was refused at construction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SquareSignatureSetupError {
    /// No signature key: nothing could ever verify.
    #[error("no Square webhook signature key is configured")]
    NoKey,
    /// No notification URL: the signed string would not be the subscription's.
    #[error("no Square webhook notification URL is configured")]
    NoUrl,
}

/// Verifies Square notifications for one subscription.
pub struct SquareSignature {
    key: Vec<u8>,
    notification_url: String,
}

impl std::fmt::Debug for SquareSignature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SquareSignature")
            .field("notification_url", &self.notification_url)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl SquareSignature {
    /// The verifier for the subscription at `notification_url` (exactly as registered with
    /// Square) with its `signature_key`. Neither may be empty.
    pub fn new(
        signature_key: &str,
        notification_url: &str,
    ) -> Result<Self, SquareSignatureSetupError> {
        if signature_key.is_empty() {
            return Err(SquareSignatureSetupError::NoKey);
        }
        if notification_url.is_empty() {
            return Err(SquareSignatureSetupError::NoUrl);
        }
        Ok(Self {
            key: signature_key.as_bytes().to_vec(),
            notification_url: notification_url.to_owned(),
        })
    }

    /// Whether `headers` carry Square's signature of `body` for our subscription.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), SignatureError> {
        let header = headers
            .get(SIGNATURE_HEADER)
            .ok_or(SignatureError::Missing)?;
        let text = header.to_str().map_err(|_| SignatureError::Malformed)?;
        let signature = b64::decode(text.trim(), Alphabet::Standard)
            .filter(|bytes| !bytes.is_empty())
            .ok_or(SignatureError::Malformed)?;
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(self.notification_url.as_bytes());
        mac.update(body);
        // verify_slice compares in constant time (and refuses any other length).
        mac.verify_slice(&signature)
            .map_err(|_| SignatureError::NoValidSignature)
    }

    /// The signature Square would send for `body` (for the fake PSP and tests).
    pub fn sign(&self, body: &[u8]) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(self.notification_url.as_bytes());
        mac.update(body);
        b64::encode(&mac.finalize().into_bytes(), Alphabet::Standard)
    }
}

/// The provider name of Square's webhooks (`/webhooks/square`).
pub const SQUARE_PROVIDER: &str = "square";

/// Square's webhook scheme: [`SquareSignature`] over our notification URL, then
/// [`parse_event`].
#[derive(Debug)]
pub struct SquareWebhooks {
    provider: String,
    signature: SquareSignature,
}

impl SquareWebhooks {
    /// The scheme for provider `square`, verifying with `signature_key` over `notification_url`
    /// (exactly as registered with Square).
    pub fn new(
        signature_key: &str,
        notification_url: &str,
    ) -> Result<Self, SquareSignatureSetupError> {
        Ok(Self {
            provider: SQUARE_PROVIDER.to_owned(),
            signature: SquareSignature::new(signature_key, notification_url)?,
        })
    }
}

impl SquareWebhooks {
    /// The same scheme under another provider name.
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = provider.into();
        self
    }
}

impl WebhookScheme for SquareWebhooks {
    fn provider(&self) -> &str {
        &self.provider
    }

    /// Square signs no timestamp: `now_s` plays no part (replays are harmless: event dedup and
    /// the cross-checks).
    fn verify(&self, headers: &HeaderMap, body: &[u8], _now_s: i64) -> Result<(), SignatureError> {
        self.signature.verify(headers, body)
    }

    fn parse(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error> {
        parse_event(body)
    }
}

/// A Square notification, as far as payonce reads it.
#[derive(Deserialize)]
struct Event {
    event_id: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    data: Value,
}

/// Our payment id in a Square object's `reference_id`, if it is one payonce makes (`pay_` and 32
/// hex digits): a payment taken another way on the same account (a point of sale, another
/// integration) is none of ours.
fn our_payment_id(reference_id: Option<&str>) -> Option<String> {
    reference_id
        .filter(|id| super::twoc2p_ids::invoice_no_for(id).is_some())
        .map(str::to_owned)
}

/// Reads a verified Square notification: `payment.created` / `payment.updated` carry the payment
/// (`data.object.payment`), ours by its `reference_id`, read by `payment_settlement`;
/// `refund.created` / `refund.updated` carry the refund (`data.object.refund`), ours by its
/// `reason` (our refund id). The amount reported is the object's
/// `amount_money`. Square reports no live mode in the body (its `square-environment` header is
/// not signed).
pub fn parse_event(body: &[u8]) -> Result<PspEvent, serde_json::Error> {
    let event: Event = serde_json::from_slice(body)?;
    let object = &event.data["object"];
    let mut read = PspEvent {
        event_id: event.event_id,
        kind: event.kind,
        payment_id: None,
        settlement: None,
        refund: None,
        refunds_changed: false,
        amount: None,
        livemode: None,
        account: None,
    };
    if let Some(payment) = object.get("payment").filter(|p| p.is_object()) {
        read.payment_id = our_payment_id(payment["reference_id"].as_str());
        if read.payment_id.is_some() {
            read.settlement = payment_settlement(payment);
            read.amount = super::square::checked_amount(payment);
        }
    } else if let Some(refund) = object.get("refund").filter(|r| r.is_object()) {
        let refund_id = refund["reason"]
            .as_str()
            .filter(|id| crate::domain::is_refund_id(id));
        if let (Some(refund_id), Some(settlement)) = (refund_id, refund_settlement(refund)) {
            read.refund = Some(RefundEvent {
                refund_id: refund_id.to_owned(),
                settlement,
            });
            read.amount = super::square::checked_amount(refund);
        }
    }
    Ok(read)
}

/// What a Square payment's status says about the attempt: the one reading of a payment, shared
/// by webhooks and the adapter's create, completion, cancel and lookup ([`super::square`]).
///
/// - `APPROVED` → authorized for `approved_money` (else `amount_money`), until `delayed_until`
///   where the delay's action is to cancel (Square's default);
/// - `COMPLETED` → captured for `amount_money` (payonce sends no tip);
/// - `CANCELED` → canceled: expired when it was voided at or after `delayed_until` (the lapse),
///   requested otherwise;
/// - `FAILED` → declined with the first error code of `card_details` (authentication required
///   for a card that needed the buyer verified);
/// - `PENDING` → pending: nothing but its id;
/// - anything else → none.
pub(crate) fn payment_settlement(payment: &Value) -> Option<Settlement> {
    let id = payment["id"].as_str().map(str::to_owned);
    let amount = payment["amount_money"]["amount"].as_i64();
    let delayed_until = payment["delayed_until"]
        .as_str()
        .and_then(crate::logging::epoch_ms_of_rfc3339);
    match payment["status"].as_str()? {
        "APPROVED" => Some(Settlement::Authorized {
            provider_payment_id: id?,
            amount_capturable: payment["approved_money"]["amount"].as_i64().or(amount)?,
            capture_before_ms: match payment["delay_action"].as_str() {
                None | Some("CANCEL") => delayed_until,
                Some(_) => None,
            },
        }),
        "PENDING" => Some(Settlement::Pending {
            provider_payment_id: id?,
        }),
        "COMPLETED" => Some(Settlement::Captured {
            provider_payment_id: id?,
            amount_captured: amount?,
        }),
        "CANCELED" => {
            let voided_at = payment["card_details"]["card_payment_timeline"]["voided_at"]
                .as_str()
                .and_then(crate::logging::epoch_ms_of_rfc3339);
            let lapsed =
                matches!((voided_at, delayed_until), (Some(at), Some(until)) if at >= until);
            Some(Settlement::Canceled {
                provider_payment_id: id,
                reason: if lapsed {
                    CancellationReason::Expired
                } else {
                    CancellationReason::Requested
                },
            })
        }
        "FAILED" => {
            let code = payment["card_details"]["errors"][0]["code"]
                .as_str()
                .unwrap_or("GENERIC_DECLINE");
            Some(if code == super::square::VERIFICATION_REQUIRED {
                Settlement::AuthenticationRequired {
                    provider_payment_id: id,
                }
            } else {
                Settlement::Declined {
                    provider_payment_id: id,
                    decline_code: code.to_owned(),
                }
            })
        }
        _ => None,
    }
}

/// What a Square refund's status says: `PENDING` → pending; `COMPLETED` → succeeded;
/// `REJECTED` and `FAILED` → failed (the status, lower case, as the code); anything else, or no
/// id → none.
pub(crate) fn refund_settlement(refund: &Value) -> Option<RefundSettlement> {
    let id = refund["id"].as_str()?.to_owned();
    match refund["status"].as_str()? {
        "PENDING" => Some(RefundSettlement::Pending {
            provider_refund_id: id,
        }),
        "COMPLETED" => Some(RefundSettlement::Succeeded {
            provider_refund_id: id,
        }),
        status @ ("REJECTED" | "FAILED") => Some(RefundSettlement::Failed {
            provider_refund_id: Some(id),
            code: status.to_ascii_lowercase(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::http::HeaderValue;

    fn headers(signature: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(signature) = signature {
            headers.insert(SIGNATURE_HEADER, HeaderValue::from_str(signature).unwrap());
        }
        headers
    }

    /// Every vector of testdata/square-webhook-signatures.json, computed independently of this
    /// code (a copy of the steering repository's shared/testdata, checked against it when that
    /// folder sits beside the repository, as in CI).
    #[test]
    fn passes_the_independent_vectors() {
        let here = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/square-webhook-signatures.json"
        );
        let text = std::fs::read_to_string(here).expect("the vendored test vectors");
        let upstream = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/testdata/square-webhook-signatures.json"
        );
        if let Ok(original) = std::fs::read_to_string(upstream) {
            assert_eq!(
                original, text,
                "the vendored vectors drifted from shared/testdata"
            );
        }
        let vectors: Value = serde_json::from_str(&text).unwrap();
        let verifier = SquareSignature::new(
            vectors["signature_key"].as_str().unwrap(),
            vectors["notification_url"].as_str().unwrap(),
        )
        .unwrap();
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() >= 9);
        for case in cases {
            let name = &case["name"];
            let body = case["body"].as_str().unwrap().as_bytes();
            let signature = case["signature"].as_str().unwrap();
            let outcome = verifier.verify(&headers(Some(signature)), body);
            let valid = case["valid"].as_bool().unwrap();
            assert_eq!(outcome.is_ok(), valid, "{name}: {outcome:?}");
            if valid {
                assert_eq!(verifier.sign(body), signature, "{name}");
            } else {
                let expected = match case["name"].as_str().unwrap_or("") {
                    // An empty header is no signature; hex digits are not base64 of 32 bytes.
                    "empty" => SignatureError::Malformed,
                    _ => SignatureError::NoValidSignature,
                };
                assert_eq!(outcome, Err(expected), "{name}");
            }
        }
    }

    #[test]
    fn a_missing_or_unreadable_header_is_refused_and_setup_needs_a_key_and_a_url() {
        let verifier =
            SquareSignature::new("k", "https://api.example.com/webhooks/square").unwrap();
        assert_eq!(
            verifier.verify(&headers(None), b"{}"),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verifier.verify(&headers(Some("not base64!")), b"{}"),
            Err(SignatureError::Malformed)
        );
        let signed = verifier.sign(b"{}");
        assert_eq!(verifier.verify(&headers(Some(&signed)), b"{}"), Ok(()));
        assert_eq!(
            verifier.verify(&headers(Some(&signed)), b"{ }"),
            Err(SignatureError::NoValidSignature)
        );
        assert_eq!(
            SquareSignature::new("", "https://x").unwrap_err(),
            SquareSignatureSetupError::NoKey
        );
        assert_eq!(
            SquareSignature::new("k", "").unwrap_err(),
            SquareSignatureSetupError::NoUrl
        );
        assert!(!format!("{verifier:?}").contains("\"k\""));
    }

    fn notification(kind: &str, object: Value) -> Vec<u8> {
        serde_json::json!({
            "merchant_id": "6SSW7HV8K2ST5",
            "type": kind,
            "event_id": "6a8f5f28-54a1-4eb0-a98a-3111513fd4fc",
            "created_at": "2026-12-01T10:00:01.000Z",
            "data": {"type": kind.split('.').next(), "id": "R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY", "object": object},
        })
        .to_string()
        .into_bytes()
    }

    fn payment(status: &str, reference_id: &str) -> Value {
        serde_json::json!({"payment": {
            "id": "R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY", "status": status, "reference_id": reference_id,
            "amount_money": {"amount": 1000, "currency": "USD"},
            "approved_money": {"amount": 1000, "currency": "USD"},
            "delay_action": "CANCEL", "delayed_until": "2026-12-08T10:00:00.000Z",
            "card_details": {"status": "AUTHORIZED"},
        }})
    }

    const OURS: &str = "pay_0123456789abcdef0123456789abcdef";

    #[test]
    fn payment_events_name_our_payment_by_reference_and_say_what_its_status_says() {
        // GIVEN a payment.created for an approved payment of ours
        let event =
            parse_event(&notification("payment.created", payment("APPROVED", OURS))).unwrap();
        // THEN it names our payment, the authorization with its lapse, and the amount reported
        assert_eq!(event.event_id, "6a8f5f28-54a1-4eb0-a98a-3111513fd4fc");
        assert_eq!(event.kind, "payment.created");
        assert_eq!(event.payment_id.as_deref(), Some(OURS));
        assert_eq!(
            event.settlement,
            Some(Settlement::Authorized {
                provider_payment_id: "R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY".into(),
                amount_capturable: 1000,
                capture_before_ms: crate::logging::epoch_ms_of_rfc3339("2026-12-08T10:00:00.000Z"),
            })
        );
        assert_eq!(
            event.amount,
            Some(crate::ports::CheckedAmount {
                minor: 1000,
                currency: "usd".into()
            })
        );
        assert_eq!((event.livemode, event.refund.is_none()), (None, true));
        // AND completed is captured, failed declined with card_details' code, pending its id
        let completed =
            parse_event(&notification("payment.updated", payment("COMPLETED", OURS))).unwrap();
        assert!(matches!(
            completed.settlement,
            Some(Settlement::Captured {
                amount_captured: 1000,
                ..
            })
        ));
        let mut failed = payment("FAILED", OURS);
        failed["payment"]["card_details"]["errors"] =
            serde_json::json!([{"category": "PAYMENT_METHOD_ERROR", "code": "INSUFFICIENT_FUNDS"}]);
        let failed = parse_event(&notification("payment.updated", failed)).unwrap();
        assert!(
            matches!(failed.settlement, Some(Settlement::Declined { ref decline_code, .. }) if decline_code == "INSUFFICIENT_FUNDS")
        );
        let pending =
            parse_event(&notification("payment.updated", payment("PENDING", OURS))).unwrap();
        assert_eq!(
            pending.settlement,
            Some(Settlement::Pending {
                provider_payment_id: "R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY".into()
            })
        );
        // AND a payment taken another way on the account (no reference of ours) is none of ours
        for reference in [
            "",
            "order-42",
            "pay_1",
            "pay_0123456789ABCDEF0123456789ABCDEF",
        ] {
            let foreign = parse_event(&notification(
                "payment.updated",
                payment("COMPLETED", reference),
            ))
            .unwrap();
            assert_eq!(
                (foreign.payment_id, foreign.settlement),
                (None, None),
                "{reference:?}"
            );
        }
    }

    #[test]
    fn refund_events_name_our_refund_by_its_reason() {
        let refund = |status: &str, reason: &str| {
            serde_json::json!({"refund": {"id": "R2B_refund1", "status": status, "reason": reason,
                "payment_id": "R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY", "amount_money": {"amount": 400, "currency": "USD"}}})
        };
        let ours = "rfd_0123456789abcdef0123456789abcdef_1";
        let event =
            parse_event(&notification("refund.updated", refund("COMPLETED", ours))).unwrap();
        assert_eq!(
            event.refund,
            Some(RefundEvent {
                refund_id: ours.into(),
                settlement: RefundSettlement::Succeeded {
                    provider_refund_id: "R2B_refund1".into()
                },
            })
        );
        assert_eq!(event.amount.map(|a| a.minor), Some(400));
        let failed = parse_event(&notification("refund.updated", refund("FAILED", ours))).unwrap();
        assert!(matches!(
            failed.refund.map(|r| r.settlement),
            Some(RefundSettlement::Failed { .. })
        ));
        // A refund made another way (a reason not ours) is ignored.
        let foreign = parse_event(&notification(
            "refund.created",
            refund("PENDING", "damaged"),
        ))
        .unwrap();
        assert_eq!(foreign.refund, None);
        // A body that is not a notification does not parse.
        assert!(parse_event(b"{}").is_err());
    }

    #[test]
    fn the_scheme_verifies_then_reads() {
        let scheme = SquareWebhooks::new("k", "https://api.example.com/webhooks/square").unwrap();
        let body = notification("payment.updated", payment("COMPLETED", OURS));
        let signature = SquareSignature::new("k", "https://api.example.com/webhooks/square")
            .unwrap()
            .sign(&body);
        assert_eq!(scheme.verify(&headers(Some(&signature)), &body, 0), Ok(()));
        assert_eq!(
            scheme.verify(&headers(Some(&signature)), b"{}", 0),
            Err(SignatureError::NoValidSignature)
        );
        assert_eq!(
            scheme.parse(&body).unwrap().payment_id.as_deref(),
            Some(OURS)
        );
        assert_eq!(scheme.provider(), "square");
        assert_eq!(scheme.with_provider("sq").provider(), "sq");
    }
}
