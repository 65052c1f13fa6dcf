//! Stripe's webhook scheme: `Stripe-Signature: t=<epoch s>,v1=<hex>[,v1=<hex>...]`, the HMAC-SHA256
//! of `<t>.<raw body>` under the endpoint secret, 300 s tolerance, any matching `v1` accepted
//! (Stripe signs with old and new secrets while one rolls), compared in constant time. The fake
//! PSP uses the same scheme.

use super::stripe::{PaymentIntent, StripeRefund};
use crate::domain::{NextAction, Settlement};
use crate::ports::{
    CheckedAmount, PspEvent, RefundEvent, SignatureError, WebhookScheme,
    AUTHENTICATION_FAILED_CODE, AUTHENTICATION_REQUIRED_CODE,
};
use hmac::{Hmac, KeyInit, Mac};
use lambda_http::http::HeaderMap;
use serde::Deserialize;
use sha2::Sha256;

/// How old a signature may be, in seconds.
pub const TOLERANCE_S: i64 = 300;

/// The Stripe webhook scheme with the endpoint's secrets (one, or two while rotating ours).
pub struct StripeWebhooks {
    provider: String,
    secrets: Vec<String>,
}

impl std::fmt::Debug for StripeWebhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeWebhooks")
            .field("provider", &self.provider)
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl StripeWebhooks {
    /// The scheme for `provider` (`stripe`, `fake`) verifying against any of `secrets`.
    pub fn new(provider: impl Into<String>, secrets: Vec<String>) -> Self {
        Self {
            provider: provider.into(),
            secrets,
        }
    }
}

/// A parsed `Stripe-Signature` header.
#[derive(Debug, PartialEq, Eq)]
struct SignatureHeader<'a> {
    timestamp: i64,
    v1: Vec<&'a str>,
}

/// Parses the header: exactly one integer `t`; any number of `v1` (other schemes ignored).
fn parse_header(raw: &str) -> Result<SignatureHeader<'_>, SignatureError> {
    let mut timestamp = None;
    let mut v1 = Vec::new();
    for part in raw.split(',') {
        let (name, value) = part
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        match name {
            "t" if timestamp.is_none() => {
                timestamp = Some(
                    value
                        .parse::<i64>()
                        .map_err(|_| SignatureError::Malformed)?,
                )
            }
            "t" => return Err(SignatureError::Malformed),
            "v1" => v1.push(value),
            _ => {}
        }
    }
    Ok(SignatureHeader {
        timestamp: timestamp.ok_or(SignatureError::Malformed)?,
        v1,
    })
}

/// Verifies `body` against `header` at `now_s` with any of `secrets`.
pub fn verify_signature(
    header: Option<&str>,
    body: &[u8],
    secrets: &[String],
    now_s: i64,
) -> Result<(), SignatureError> {
    let parsed = parse_header(header.ok_or(SignatureError::Missing)?)?;
    if parsed.v1.is_empty() {
        return Err(SignatureError::NoValidSignature);
    }
    // `abs_diff`: a timestamp near i64's ends must not overflow the subtraction.
    if now_s.abs_diff(parsed.timestamp) > TOLERANCE_S.unsigned_abs() {
        return Err(SignatureError::Stale);
    }
    let candidates: Vec<Vec<u8>> = parsed
        .v1
        .iter()
        // Stripe writes lowercase hex; anything else is not its signature.
        .filter(|sig| {
            sig.len() == 64
                && sig
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .filter_map(|sig| hex::decode(sig).ok())
        .collect();
    for secret in secrets {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
            continue;
        };
        mac.update(parsed.timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        // verify_slice compares in constant time.
        if candidates
            .iter()
            .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
        {
            return Ok(());
        }
    }
    Err(SignatureError::NoValidSignature)
}

#[derive(Deserialize)]
struct Event {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    livemode: Option<bool>,
    /// Set on an event of a Connect account (another business than this account's).
    #[serde(default)]
    account: Option<String>,
    /// When Stripe created the event (epoch seconds).
    #[serde(default)]
    created: Option<i64>,
    data: EventData,
}

#[derive(Deserialize)]
struct EventData {
    object: serde_json::Value,
}

/// Reads a verified event: its id, the settlement it implies for the attempt named in its
/// `metadata.payment_id`, if any, and what it says about our refunds. `refund.created`,
/// `refund.updated`, `refund.failed` and `charge.refund.updated` carry a Refund: its status is
/// read as the refund lookup reads it, for the refund named in its `metadata.refund_id` (none for
/// a refund payonce did not make). `charge.refunded` carries a Charge: it names no refund of
/// ours, so it only says the charge's refunds changed.
pub fn parse_event(body: &[u8]) -> Result<PspEvent, serde_json::Error> {
    let event: Event = serde_json::from_slice(body)?;
    let object = &event.data.object;
    let payment_id = object["metadata"]["payment_id"].as_str().map(str::to_owned);
    let intent_id = object["id"].as_str().map(str::to_owned);
    let settlement = intent_settlement(&event, intent_id);
    let refund = match event.kind.as_str() {
        "refund.created" | "refund.updated" | "refund.failed" | "charge.refund.updated" => {
            refund_event(object)?
        }
        _ => None,
    };
    // The object's own amount: a PaymentIntent's, a Refund's or a Charge's.
    let amount = CheckedAmount::of_object(object);
    Ok(PspEvent {
        amount,
        livemode: event.livemode,
        account: event.account,
        refunds_changed: event.kind == "charge.refunded",
        event_id: event.id,
        kind: event.kind,
        payment_id,
        settlement,
        refund,
    })
}

/// What a `payment_intent.*` event says of the attempt (Stripe, "Types of events"):
/// - `succeeded`: charged; of a manual-capture intent, what was captured (`amount_received`);
/// - `payment_failed`: declined, or the customer failed 3-D Secure
///   (`payment_intent_authentication_failure`);
/// - `requires_action`: waiting for the customer at `next_action.redirect_to_url`, open for
///   [`crate::domain::ACTION_TIMEOUT`] from the event;
/// - `processing`: the customer acted and the charge is underway;
/// - `amount_capturable_updated`: a manual-capture intent is authorized (`requires_capture`);
/// - `canceled`: nothing was charged (why: its `cancellation_reason`).
fn intent_settlement(event: &Event, intent_id: Option<String>) -> Option<Settlement> {
    let object = &event.data.object;
    let provider_payment_id = intent_id?;
    Some(match event.kind.as_str() {
        "payment_intent.succeeded" => match object["amount_received"].as_i64() {
            Some(amount_captured) if object["capture_method"] == "manual" => Settlement::Captured {
                provider_payment_id,
                amount_captured,
            },
            _ => Settlement::Succeeded {
                provider_payment_id,
            },
        },
        "payment_intent.payment_failed" => {
            let error = &object["last_payment_error"];
            if error["code"] == AUTHENTICATION_FAILED_CODE {
                return Some(Settlement::AuthenticationFailed {
                    provider_payment_id: Some(provider_payment_id),
                });
            }
            if error["code"] == AUTHENTICATION_REQUIRED_CODE {
                return Some(Settlement::AuthenticationRequired {
                    provider_payment_id: Some(provider_payment_id),
                });
            }
            let code = error["decline_code"]
                .as_str()
                .or(error["code"].as_str())
                .unwrap_or("generic_decline");
            Settlement::Declined {
                provider_payment_id: Some(provider_payment_id),
                decline_code: code.to_owned(),
            }
        }
        "payment_intent.requires_action" => {
            // Only a redirect a browser can follow, read as the create's answer is.
            let intent = PaymentIntent::deserialize(object).ok()?;
            let url = intent.redirect_url()?;
            let created_ms = event.created?.saturating_mul(1000);
            Settlement::ActionRequired {
                provider_payment_id,
                next_action: NextAction {
                    url: url.to_owned(),
                    expires_at_ms: created_ms
                        .saturating_add(crate::clock::duration_ms(crate::domain::ACTION_TIMEOUT)),
                },
            }
        }
        "payment_intent.processing" => Settlement::ActionCompleted {
            provider_payment_id,
        },
        // Canceled: by payonce (a cancel, reconcile's of an action never taken, the fence's of
        // the intent it created to block the key) or by Stripe (an authorization that lapsed).
        // Nothing was charged, and nothing can be under the intent's key.
        "payment_intent.canceled" => Settlement::Canceled {
            provider_payment_id: Some(provider_payment_id),
            reason: super::stripe_operations::cancellation_reason(
                object["cancellation_reason"].as_str(),
            ),
        },
        "payment_intent.amount_capturable_updated" if object["status"] == "requires_capture" => {
            let intent = PaymentIntent::deserialize(object).ok()?;
            Settlement::Authorized {
                amount_capturable: intent.amount_capturable?,
                capture_before_ms: intent.capture_before_ms(),
                provider_payment_id,
            }
        }
        _ => return None,
    })
}

/// Our refund a Refund object names in its `metadata.refund_id`, with what the object says.
fn refund_event(object: &serde_json::Value) -> Result<Option<RefundEvent>, serde_json::Error> {
    // A refund payonce did not make is none of its business, however it reads.
    let Some(refund_id) = object["metadata"]["refund_id"].as_str().map(str::to_owned) else {
        return Ok(None);
    };
    Ok(Some(RefundEvent {
        refund_id,
        settlement: StripeRefund::deserialize(object)?.settlement(),
    }))
}

impl WebhookScheme for StripeWebhooks {
    fn provider(&self) -> &str {
        &self.provider
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<(), SignatureError> {
        let header = match headers.get("stripe-signature") {
            Some(value) => Some(value.to_str().map_err(|_| SignatureError::Malformed)?),
            None => None,
        };
        verify_signature(header, body, &self.secrets, now_s)
    }

    fn parse(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error> {
        parse_event(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{CancellationReason, RefundSettlement};
    use serde_json::{json, Value};

    /// Every vector of testdata/stripe-webhook-signatures.json, computed independently of this
    /// code (a copy of the steering repository's shared/testdata, checked against it when that
    /// folder sits beside the repository, as in CI).
    #[test]
    fn passes_the_independent_vectors() {
        let here = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/stripe-webhook-signatures.json"
        );
        let text = std::fs::read_to_string(here).expect("the vendored test vectors");
        let upstream = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/testdata/stripe-webhook-signatures.json"
        );
        if let Ok(original) = std::fs::read_to_string(upstream) {
            assert_eq!(
                original, text,
                "the vendored vectors drifted from shared/testdata"
            );
        }
        let vectors: serde_json::Value = serde_json::from_str(&text).unwrap();
        let secret = vectors["secret"].as_str().unwrap().to_owned();
        let payload = vectors["payload"].as_str().unwrap().as_bytes();
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() >= 10);
        for case in cases {
            let outcome = verify_signature(
                case["header"].as_str(),
                payload,
                std::slice::from_ref(&secret),
                case["now"].as_i64().unwrap(),
            );
            assert_eq!(
                outcome.is_ok(),
                case["valid"].as_bool().unwrap(),
                "{}: {outcome:?}",
                case["name"]
            );
            let why = case["why"].as_str().unwrap_or("");
            if why.contains("400") {
                assert_eq!(outcome, Err(SignatureError::Malformed), "{}", case["name"]);
            } else if !case["valid"].as_bool().unwrap() {
                assert!(
                    matches!(
                        outcome,
                        Err(SignatureError::NoValidSignature | SignatureError::Stale)
                    ),
                    "{}",
                    case["name"]
                );
            }
        }
    }

    #[test]
    fn a_tampered_body_or_another_secret_fails_and_rotation_accepts_either_secret() {
        let body = br#"{"id":"evt_1"}"#;
        let header = |secret: &str| {
            let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
            mac.update(b"1000.");
            mac.update(body);
            format!("t=1000,v1={}", hex::encode(mac.finalize().into_bytes()))
        };
        let ok = header("whsec_a");
        assert_eq!(
            verify_signature(Some(&ok), body, &["whsec_a".into()], 1000),
            Ok(())
        );
        assert_eq!(
            verify_signature(Some(&ok), br#"{"id":"evt_2"}"#, &["whsec_a".into()], 1000),
            Err(SignatureError::NoValidSignature)
        );
        assert_eq!(
            verify_signature(Some(&ok), body, &["whsec_b".into()], 1000),
            Err(SignatureError::NoValidSignature)
        );
        assert_eq!(
            verify_signature(Some(&ok), body, &["whsec_b".into(), "whsec_a".into()], 1000),
            Ok(())
        );
        assert_eq!(
            verify_signature(None, body, &["whsec_a".into()], 1000),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify_signature(Some("t=1000,t=1000,v1=00"), body, &["whsec_a".into()], 1000),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify_signature(Some("t=abc,v1=00"), body, &["whsec_a".into()], 1000),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify_signature(Some(&ok), body, &["whsec_a".into()], 1301),
            Err(SignatureError::Stale)
        );
    }

    #[test]
    fn a_timestamp_at_either_end_of_i64_is_stale_not_an_overflow() {
        // `(now - t).abs()` overflows (and panics in a debug build) for t near i64::MIN.
        let body = b"{}";
        let far_apart = [
            (i64::MIN, 0),
            (i64::MIN, i64::MAX),
            (i64::MIN + 1, 1_796_000_000),
            (i64::MAX, 0),
            (i64::MAX, i64::MIN),
        ];
        for (t, now) in far_apart {
            let header = format!("t={t},v1={}", "00".repeat(32));
            assert_eq!(
                verify_signature(Some(&header), body, &["whsec_a".into()], now),
                Err(SignatureError::Stale),
                "t={t} now={now}"
            );
        }
    }

    #[test]
    fn events_map_to_settlements() {
        let ok = parse_event(br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","metadata":{"payment_id":"pay_1"}}}}"#).unwrap();
        assert_eq!(ok.payment_id.as_deref(), Some("pay_1"));
        assert_eq!(
            ok.settlement,
            Some(Settlement::Succeeded {
                provider_payment_id: "pi_1".into()
            })
        );
        let failed = parse_event(br#"{"id":"evt_2","type":"payment_intent.payment_failed","data":{"object":{"id":"pi_2","metadata":{"payment_id":"pay_2"},"last_payment_error":{"decline_code":"insufficient_funds"}}}}"#).unwrap();
        assert_eq!(
            failed.settlement,
            Some(Settlement::Declined {
                provider_payment_id: Some("pi_2".into()),
                decline_code: "insufficient_funds".into()
            })
        );
        let other = parse_event(
            br#"{"id":"evt_3","type":"customer.created","data":{"object":{"id":"cus_1"}}}"#,
        )
        .unwrap();
        assert_eq!((other.payment_id, other.settlement), (None, None));
        assert!(parse_event(b"not json").is_err());
    }

    /// An event as Stripe sends it (API version 2024-10-28.acacia) about `object`.
    fn event(kind: &str, data: Value) -> Vec<u8> {
        json!({
            "id": "evt_1",
            "object": "event",
            "type": kind,
            "created": 1_730_000_100,
            "api_version": "2024-10-28.acacia",
            "livemode": false,
            "data": data,
            "request": {"id": null, "idempotency_key": "payonce-refund-pay_1-1"},
        })
        .to_string()
        .into_bytes()
    }

    /// A Refund as Stripe serialises it ("The Refund object"; the fake PSP's shape).
    fn refund(status: &str, metadata: Value) -> Value {
        let mut refund = json!({
            "id": "re_1",
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

    fn ours() -> Value {
        json!({"refund_id": "rfd_1_1", "payment_id": "pay_1"})
    }

    fn refund_of(event: &PspEvent) -> (Option<&str>, Option<&RefundSettlement>) {
        let refund = event.refund.as_ref();
        (
            refund.map(|r| r.refund_id.as_str()),
            refund.map(|r| &r.settlement),
        )
    }

    #[test]
    fn refund_events_name_our_refund_and_what_it_says() {
        let succeeded = RefundSettlement::Succeeded {
            provider_refund_id: "re_1".into(),
        };
        let pending = RefundSettlement::Pending {
            provider_refund_id: "re_1".into(),
        };
        let failed = RefundSettlement::Failed {
            provider_refund_id: Some("re_1".into()),
            code: "expired_or_canceled_card".into(),
        };
        let updated = |status: &str, previous: &str| json!({"object": refund(status, ours()), "previous_attributes": {"status": previous}});
        let cases = [
            (
                "refund.created",
                json!({"object": refund("succeeded", ours())}),
                &succeeded,
            ),
            (
                "refund.created",
                json!({"object": refund("pending", ours())}),
                &pending,
            ),
            (
                "refund.updated",
                updated("succeeded", "pending"),
                &succeeded,
            ),
            ("refund.updated", updated("failed", "succeeded"), &failed),
            (
                "refund.updated",
                updated("requires_action", "pending"),
                &pending,
            ),
            (
                "refund.failed",
                json!({"object": refund("failed", ours())}),
                &failed,
            ),
            (
                "charge.refund.updated",
                updated("failed", "succeeded"),
                &failed,
            ),
        ];
        for (kind, data, settlement) in cases {
            let parsed = parse_event(&event(kind, data)).unwrap();
            assert_eq!(
                parsed,
                PspEvent {
                    event_id: "evt_1".into(),
                    kind: kind.into(),
                    payment_id: Some("pay_1".into()),
                    settlement: None,
                    refund: Some(RefundEvent {
                        refund_id: "rfd_1_1".into(),
                        settlement: settlement.clone(),
                    }),
                    refunds_changed: false,
                    amount: Some(CheckedAmount {
                        minor: 300,
                        currency: "jpy".into()
                    }),
                    livemode: Some(false),
                    account: None,
                },
                "{kind}"
            );
        }
        let canceled = parse_event(&event(
            "refund.updated",
            json!({"object": refund("canceled", ours())}),
        ))
        .unwrap();
        assert_eq!(
            refund_of(&canceled),
            (
                Some("rfd_1_1"),
                Some(&RefundSettlement::Failed {
                    provider_refund_id: Some("re_1".into()),
                    code: "canceled".into()
                })
            )
        );
    }

    #[test]
    fn a_refund_payonce_did_not_make_names_none_of_ours() {
        for metadata in [json!({}), json!({"payment_id": "pay_1"}), Value::Null] {
            let parsed = parse_event(&event(
                "refund.created",
                json!({"object": refund("succeeded", metadata.clone())}),
            ))
            .unwrap();
            assert_eq!(refund_of(&parsed), (None, None), "{metadata}");
            assert_eq!(parsed.settlement, None);
            assert!(!parsed.refunds_changed);
        }
    }

    #[test]
    fn charge_refunded_says_the_refunds_changed() {
        // The Charge carries its PaymentIntent's metadata, and its refunds newest first.
        let charge = json!({
            "id": "ch_1",
            "object": "charge",
            "amount": 1000,
            "amount_captured": 1000,
            "amount_refunded": 300,
            "captured": true,
            "paid": true,
            "refunded": false,
            "status": "succeeded",
            "currency": "jpy",
            "payment_intent": "pi_1",
            "payment_method": "pm_card_visa",
            "metadata": {"payment_id": "pay_1"},
            "created": 1_730_000_000,
            "livemode": false,
            "refunds": {
                "object": "list",
                "data": [refund("succeeded", ours())],
                "has_more": false,
                "total_count": 1,
                "url": "/v1/charges/ch_1/refunds",
            },
        });
        let parsed = parse_event(&event("charge.refunded", json!({ "object": charge }))).unwrap();
        assert_eq!(
            parsed,
            PspEvent {
                event_id: "evt_1".into(),
                kind: "charge.refunded".into(),
                payment_id: Some("pay_1".into()),
                settlement: None,
                refund: None,
                refunds_changed: true,
                amount: Some(CheckedAmount {
                    minor: 1000,
                    currency: "jpy".into()
                }),
                livemode: Some(false),
                account: None,
            }
        );
        let mut bare = charge.clone();
        bare["metadata"] = json!({});
        let parsed = parse_event(&event("charge.refunded", json!({ "object": bare }))).unwrap();
        assert_eq!((parsed.payment_id, parsed.refunds_changed), (None, true));
    }

    #[test]
    fn payment_intent_events_say_nothing_about_refunds() {
        let parsed = parse_event(br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","metadata":{"payment_id":"pay_1"}}}}"#).unwrap();
        assert_eq!(
            parsed,
            PspEvent {
                event_id: "evt_1".into(),
                kind: "payment_intent.succeeded".into(),
                payment_id: Some("pay_1".into()),
                settlement: Some(Settlement::Succeeded {
                    provider_payment_id: "pi_1".into()
                }),
                refund: None,
                refunds_changed: false,
                amount: None,
                livemode: None,
                account: None,
            }
        );
        // An intent's own amount and the event's mode, when present, are read for the check.
        let parsed = parse_event(br#"{"id":"evt_2","type":"payment_intent.succeeded","livemode":true,"data":{"object":{"id":"pi_1","amount":1500,"currency":"USD","metadata":{"payment_id":"pay_1"}}}}"#).unwrap();
        assert_eq!(
            (parsed.amount, parsed.livemode),
            (
                Some(CheckedAmount {
                    minor: 1500,
                    currency: "usd".into()
                }),
                Some(true)
            )
        );
    }

    #[test]
    fn action_and_capture_events_map_to_their_settlements() {
        let settlement = |kind: &str, object: Value| {
            parse_event(&event(kind, json!({ "object": object })))
                .unwrap()
                .settlement
        };
        let intent = |extra: Value| {
            let mut object = json!({"id": "pi_1", "metadata": {"payment_id": "pay_1"}});
            object
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            object
        };
        assert_eq!(
            settlement(
                "payment_intent.requires_action",
                intent(
                    json!({"status": "requires_action", "next_action": {"type": "redirect_to_url",
                    "redirect_to_url": {"url": "https://psp.example/3ds/pi_1", "return_url": "https://shop.example/r"}}})
                )
            ),
            Some(Settlement::ActionRequired {
                provider_payment_id: "pi_1".into(),
                next_action: NextAction {
                    url: "https://psp.example/3ds/pi_1".into(),
                    expires_at_ms: 1_730_000_100_000 + 3_600_000,
                },
            })
        );
        // An action with nowhere to send a browser is no action payonce can wait on.
        assert_eq!(
            settlement(
                "payment_intent.requires_action",
                intent(
                    json!({"status": "requires_action", "next_action": {"type": "use_stripe_sdk"}})
                )
            ),
            None
        );
        assert_eq!(
            settlement(
                "payment_intent.processing",
                intent(json!({"status": "processing"}))
            ),
            Some(Settlement::ActionCompleted {
                provider_payment_id: "pi_1".into()
            })
        );
        assert_eq!(
            settlement(
                "payment_intent.amount_capturable_updated",
                intent(
                    json!({"status": "requires_capture", "amount": 3000, "amount_capturable": 3000})
                )
            ),
            Some(Settlement::Authorized {
                provider_payment_id: "pi_1".into(),
                amount_capturable: 3000,
                capture_before_ms: None,
            })
        );
        assert_eq!(
            settlement(
                "payment_intent.succeeded",
                intent(
                    json!({"status": "succeeded", "capture_method": "manual", "amount": 3000, "amount_received": 1800})
                )
            ),
            Some(Settlement::Captured {
                provider_payment_id: "pi_1".into(),
                amount_captured: 1800,
            })
        );
        assert_eq!(
            settlement(
                "payment_intent.succeeded",
                intent(json!({"status": "succeeded", "amount": 3000, "amount_received": 3000}))
            ),
            Some(Settlement::Succeeded {
                provider_payment_id: "pi_1".into()
            })
        );
        assert_eq!(
            settlement(
                "payment_intent.payment_failed",
                intent(json!({"status": "requires_payment_method",
                    "last_payment_error": {"type": "card_error", "code": "payment_intent_authentication_failure"}}))
            ),
            Some(Settlement::AuthenticationFailed {
                provider_payment_id: Some("pi_1".into())
            })
        );
        for (stripe, ours) in [
            ("requested_by_customer", CancellationReason::Requested),
            ("abandoned", CancellationReason::Abandoned),
            ("automatic", CancellationReason::Expired),
        ] {
            assert_eq!(
                settlement(
                    "payment_intent.canceled",
                    intent(json!({"status": "canceled", "cancellation_reason": stripe}))
                ),
                Some(Settlement::Canceled {
                    provider_payment_id: Some("pi_1".into()),
                    reason: ours,
                })
            );
        }
    }
}
