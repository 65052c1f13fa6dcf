//! Omise's webhook scheme: `Omise-Signature` holds the lowercase hex HMAC-SHA256 of
//! `<Omise-Signature-Timestamp>.<raw body>`, keyed with the **base64-decoded** webhook secret;
//! during a secret rotation it holds several comma-separated signatures, any of which may match.
//! The timestamp is epoch seconds; payonce allows 300 s either way (Omise publishes no tolerance).
//! Signatures are compared in constant time.
//!
//! Errors map as for Stripe: a missing header → [`SignatureError::Missing`] (400); a timestamp
//! that is not decimal epoch seconds, or a header that is not text → `Malformed` (400); a
//! timestamp outside the tolerance → `Stale` (401), checked on the timestamp itself, so a correct
//! HMAC of a stale, future or non-numeric timestamp is still refused; no matching signature →
//! `NoValidSignature` (401).
//!
//! Events: `{"object":"event","id":"evnt_…","key":"charge.complete","livemode":false,
//! "data":{…}}`, where `data` is the object the event is about, as it was when the event was made.

use super::b64::{self, Alphabet};
use crate::domain::{RefundSettlement, Settlement};
use crate::ports::{CheckedAmount, PspEvent, RefundEvent, SignatureError, WebhookScheme};
use hmac::{Hmac, KeyInit, Mac};
use lambda_http::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use sha2::Sha256;

/// The provider name Omise webhooks arrive under by default (`/webhooks/omise`).
pub const OMISE_PROVIDER: &str = crate::domain::PspKind::Omise.name();

/// The header carrying the signatures.
pub const SIGNATURE_HEADER: &str = "omise-signature";

/// The header carrying the signed timestamp (epoch seconds).
pub const TIMESTAMP_HEADER: &str = "omise-signature-timestamp";

/// How far the signed timestamp may be from our clock, in seconds, either way.
pub const TOLERANCE_S: u64 = 300;

/// Why a webhook secret was refused at construction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OmiseSecretError {
    /// No secret at all: nothing could ever verify.
    #[error("no Omise webhook secret is configured")]
    NoSecret,
    /// The secret (by position, from 0) is not strict, padded, standard base64.
    #[error("Omise webhook secret #{0} is not valid base64")]
    NotBase64(usize),
    /// The secret (by position, from 0) decodes to no bytes: an HMAC key must not be empty.
    #[error("Omise webhook secret #{0} is empty")]
    Empty(usize),
}

/// The Omise webhook scheme with the endpoint's secrets (one, or two while one rotates).
pub struct OmiseWebhooks {
    provider: String,
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for OmiseWebhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OmiseWebhooks")
            .field("provider", &self.provider)
            .field("secrets", &self.keys.len())
            .finish()
    }
}

impl OmiseWebhooks {
    /// The scheme for provider `omise`, verifying against any of `secrets_base64` (the secrets
    /// as Omise shows them: standard base64, padded). A secret that is not valid base64 or
    /// decodes to nothing, or no secret at all, is refused here: the scheme never verifies with
    /// an empty key, nor with the base64 text as the key.
    pub fn new<S: AsRef<str>>(secrets_base64: &[S]) -> Result<Self, OmiseSecretError> {
        if secrets_base64.is_empty() {
            return Err(OmiseSecretError::NoSecret);
        }
        let keys = secrets_base64
            .iter()
            .enumerate()
            .map(|(i, secret)| {
                let key = b64::decode(secret.as_ref(), Alphabet::Standard)
                    .ok_or(OmiseSecretError::NotBase64(i))?;
                if key.is_empty() {
                    return Err(OmiseSecretError::Empty(i));
                }
                Ok(key)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            provider: OMISE_PROVIDER.to_owned(),
            keys,
        })
    }

    /// The same scheme under another provider name (e.g. a fake PSP speaking Omise's format).
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = provider.into();
        self
    }

    /// Verifies `body` against the two header values at `now_s`. `signatures` is the whole
    /// `Omise-Signature` value (comma-separated; spaces around each entry are ignored; hex in
    /// either case), `timestamp` the `Omise-Signature-Timestamp` value, signed as sent.
    pub fn verify_values(
        &self,
        signatures: Option<&str>,
        timestamp: Option<&str>,
        body: &[u8],
        now_s: i64,
    ) -> Result<(), SignatureError> {
        let (Some(signatures), Some(timestamp)) = (signatures, timestamp) else {
            return Err(SignatureError::Missing);
        };
        // Unsigned decimal epoch seconds: no sign, no spaces, no fraction.
        if timestamp.is_empty() || !timestamp.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SignatureError::Malformed);
        }
        let signed_at: i64 = timestamp.parse().map_err(|_| SignatureError::Malformed)?;
        if now_s.abs_diff(signed_at) > TOLERANCE_S {
            return Err(SignatureError::Stale);
        }
        let candidates: Vec<Vec<u8>> = signatures
            .split(',')
            .map(str::trim)
            .filter(|sig| sig.len() == 64)
            .filter_map(|sig| hex::decode(sig).ok())
            .collect();
        if candidates.is_empty() {
            return Err(SignatureError::NoValidSignature);
        }
        for key in &self.keys {
            let mac = mac(key, timestamp, body);
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
}

/// The HMAC of `<timestamp>.<body>` under `key`, before finalisation.
fn mac(key: &[u8], timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    // Any key length is accepted by HMAC; construction refuses empty ones.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `Omise-Signature` entry for `body` signed at `timestamp` with the decoded secret `key`
/// (lowercase hex), as Omise — and a fake PSP speaking its format — computes it.
pub fn signature(key: &[u8], timestamp: &str, body: &[u8]) -> String {
    hex::encode(mac(key, timestamp, body).finalize().into_bytes())
}

/// One header as text: all its values joined by commas (a list header may arrive split into
/// several lines); `None` if absent.
fn joined_header(headers: &HeaderMap, name: &str) -> Result<Option<String>, SignatureError> {
    let values = headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().map_err(|_| SignatureError::Malformed))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((!values.is_empty()).then(|| values.join(",")))
}

impl WebhookScheme for OmiseWebhooks {
    fn provider(&self) -> &str {
        &self.provider
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<(), SignatureError> {
        let signatures = joined_header(headers, SIGNATURE_HEADER)?;
        // Exactly one timestamp: two would leave it open which one was signed.
        let mut timestamps = headers.get_all(TIMESTAMP_HEADER).iter();
        let timestamp = match (timestamps.next(), timestamps.next()) {
            (None, _) => None,
            (Some(value), None) => Some(value.to_str().map_err(|_| SignatureError::Malformed)?),
            (Some(_), Some(_)) => return Err(SignatureError::Malformed),
        };
        self.verify_values(signatures.as_deref(), timestamp, body, now_s)
    }

    fn parse(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error> {
        parse_event(body)
    }
}

#[derive(Deserialize)]
struct Event {
    id: String,
    key: String,
    #[serde(default)]
    livemode: Option<bool>,
    #[serde(default)]
    data: Value,
}

/// Reads a verified Omise event.
///
/// - Any event whose `data` is a charge (`charge.create`, `charge.update`, `charge.complete`, …:
///   `charge.complete` is not sent for every card charge) settles the attempt named in the
///   charge's `metadata.payment_id` by the charge's `status`: `successful` → succeeded with the
///   `chrg_…` id; `failed` → declined with its `failure_code` (every documented failure code —
///   `insufficient_fund`, `invalid_security_code`, `invalid_account_number`, … — is the issuer's
///   or network's verdict on a created charge, so a decline, never a rejection of the request);
///   `expired` (never completed, e.g. 3-D Secure not done in time) and `reversed` (authorisation
///   released without capture) kept no money, so they are PSP-confirmed declines, with the
///   `failure_code` if the charge has one, else `expired` / `reversed` (not `Abandoned`, which
///   is what payonce infers, not what the PSP says); `pending` and anything else → no
///   settlement. The charge's `amount` (smallest unit, as Omise writes it) and `currency`
///   (lowercased) are reported for the cross-check.
/// - Any event whose `data` is a refund (`refund.create`) names our refund by its
///   `metadata.refund_id` (none for a refund payonce did not make) and the payment by its
///   `metadata.payment_id`. Omise refunds are final once created (the deprecated `status` reads
///   `closed`), so it is succeeded with the `rfnd_…` id — unless it reads `failed` (failed), or
///   another status appears (undocumented), left pending for the refund lookup to settle. The
///   refund's `amount` and `currency` are reported.
/// - Other events name at most the payment; nothing is applied.
///
/// `livemode` is the event's.
pub fn parse_event(body: &[u8]) -> Result<PspEvent, serde_json::Error> {
    let event: Event = serde_json::from_slice(body)?;
    let object = &event.data;
    let payment_id = object["metadata"]["payment_id"].as_str().map(str::to_owned);
    let id = object["id"].as_str().map(str::to_owned);
    let (settlement, refund, amount) = match object["object"].as_str() {
        Some("charge") => (
            charge_settlement(object, id),
            None,
            CheckedAmount::of_object(object),
        ),
        Some("refund") => (
            None,
            refund_event(object, id),
            CheckedAmount::of_object(object),
        ),
        _ => (None, None, None),
    };
    Ok(PspEvent {
        event_id: event.id,
        kind: event.key,
        payment_id,
        settlement,
        refund,
        refunds_changed: false,
        amount,
        livemode: event.livemode,
        account: None,
    })
}

/// What a charge's status says about the attempt (`id` is the charge's `chrg_…` id): the one
/// reading of an Omise charge, shared by webhooks and the adapter's create and lookup
/// ([`super::omise`]). `successful` → succeeded (needs the id); `failed` → declined with its
/// `failure_code`; `expired` and `reversed` kept no money → PSP-confirmed declines (the
/// `failure_code` if any, else `expired` / `reversed`); `pending` and any other status → none.
pub(crate) fn charge_settlement(charge: &Value, id: Option<String>) -> Option<Settlement> {
    let failure_code = charge["failure_code"].as_str();
    let declined = |default: &str| Settlement::Declined {
        provider_payment_id: id.clone(),
        decline_code: failure_code.unwrap_or(default).to_owned(),
    };
    // An authorise-only charge (`capture: false`): held while `authorized`, then captured,
    // reversed (voided) or expired (the authorization lapsed), none of them a decline.
    let authorise_only = charge["capture"].as_bool() == Some(false);
    let authorized = charge["authorized"].as_bool() == Some(true);
    let amount = charge["amount"].as_i64();
    let canceled = |reason| Settlement::Canceled {
        provider_payment_id: id.clone(),
        reason,
    };
    match charge["status"].as_str()? {
        "successful" if authorise_only => Some(Settlement::Captured {
            provider_payment_id: id.clone()?,
            amount_captured: charge["captured_amount"].as_i64().or(amount)?,
        }),
        "successful" => Some(Settlement::Succeeded {
            provider_payment_id: id.clone()?,
        }),
        "pending" if authorise_only && authorized => Some(Settlement::Authorized {
            provider_payment_id: id.clone()?,
            amount_capturable: charge["authorized_amount"].as_i64().or(amount)?,
            capture_before_ms: charge["expires_at"]
                .as_str()
                .and_then(crate::logging::epoch_ms_of_rfc3339),
        }),
        // An authorization that then failed holds no money any more: nothing can be captured
        // (a capture refused so, or a lapse Omise words this way).
        "failed" if authorise_only && authorized => {
            Some(canceled(crate::domain::CancellationReason::Expired))
        }
        "failed" if failure_code == Some(AUTHENTICATION_FAILED_CODE) => {
            Some(Settlement::AuthenticationFailed {
                provider_payment_id: id.clone(),
            })
        }
        "failed" => Some(declined("failed")),
        "expired" if authorise_only && authorized => {
            Some(canceled(crate::domain::CancellationReason::Expired))
        }
        "expired" => Some(declined("expired")),
        // Omise releases an authorization not captured in time as `reversed` with `expired`
        // set (its "Capture" page); one reversed on request has it unset.
        "reversed" if authorise_only && charge["expired"].as_bool() == Some(true) => {
            Some(canceled(crate::domain::CancellationReason::Expired))
        }
        "reversed" if authorise_only => {
            Some(canceled(crate::domain::CancellationReason::Requested))
        }
        "reversed" => Some(declined("reversed")),
        _ => None,
    }
}

/// The `failure_code` of a charge whose customer failed 3-D Secure.
pub(crate) const AUTHENTICATION_FAILED_CODE: &str = "failed_processing";

/// The customer's page of a charge waiting for 3-D Secure, if it is one payonce asked for (a
/// `return_uri` to come back to) and it is not yet authorized.
pub(crate) fn authorize_uri(charge: &Value) -> Option<&str> {
    let waiting = charge["status"].as_str() == Some("pending")
        && charge["authorized"].as_bool() != Some(true)
        && charge["return_uri"].as_str().is_some();
    charge["authorize_uri"]
        .as_str()
        .filter(|url| waiting && (url.starts_with("https://") || url.starts_with("http://")))
}

/// Our refund a refund object names in its `metadata.refund_id`, with what the object says.
fn refund_event(refund: &Value, id: Option<String>) -> Option<RefundEvent> {
    let refund_id = refund["metadata"]["refund_id"].as_str()?.to_owned();
    let settlement = refund_settlement(refund, id?);
    Some(RefundEvent {
        refund_id,
        settlement,
    })
}

/// What a refund object (`rfnd_…` id `provider_refund_id`) says, shared by webhooks and the
/// adapter ([`super::omise`]): Omise refunds are final once created (the deprecated `status`
/// reads `closed`), so succeeded — unless the status reads `failed`, which fails it (also after
/// it read `closed`: reconcile watches succeeded refunds for a week), or another status appears
/// (undocumented), which is left pending for the refund lookup to settle.
pub(crate) fn refund_settlement(refund: &Value, provider_refund_id: String) -> RefundSettlement {
    match refund["status"].as_str() {
        None | Some("closed") => RefundSettlement::Succeeded { provider_refund_id },
        // The money did not go back (even after the refund first read `closed`): the refund
        // transition takes it back from succeeded, and its amount is refundable again.
        Some("failed") => RefundSettlement::Failed {
            provider_refund_id: Some(provider_refund_id),
            code: "failed".into(),
        },
        Some(_) => RefundSettlement::Pending { provider_refund_id },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::http::HeaderValue;
    use serde_json::json;

    const VECTOR_SECRET: &str = "cGF5b25jZS1vbWlzZS12ZWN0b3JzLWtleS03ZDIxISE=";

    fn headers(signature: Option<&str>, timestamp: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(signature) = signature {
            headers.insert(SIGNATURE_HEADER, HeaderValue::from_str(signature).unwrap());
        }
        if let Some(timestamp) = timestamp {
            headers.insert(TIMESTAMP_HEADER, HeaderValue::from_str(timestamp).unwrap());
        }
        headers
    }

    /// Every vector of testdata/omise-webhook-signatures.json, computed independently of this
    /// code (a copy of the steering repository's shared/testdata, checked against it when that
    /// folder sits beside the repository, as in CI), through the scheme's header handling.
    #[test]
    fn passes_the_independent_vectors() {
        let here = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/omise-webhook-signatures.json"
        );
        let text = std::fs::read_to_string(here).expect("the vendored test vectors");
        let upstream = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/testdata/omise-webhook-signatures.json"
        );
        if let Ok(original) = std::fs::read_to_string(upstream) {
            assert_eq!(
                original, text,
                "the vendored vectors drifted from shared/testdata"
            );
        }
        let vectors: Value = serde_json::from_str(&text).unwrap();
        let scheme = OmiseWebhooks::new(&[vectors["secret_base64"].as_str().unwrap()]).unwrap();
        let payload = vectors["payload"].as_str().unwrap().as_bytes();
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() >= 11);
        for case in cases {
            let name = &case["name"];
            let outcome = scheme.verify(
                &headers(case["signature"].as_str(), case["timestamp"].as_str()),
                payload,
                case["now"].as_i64().unwrap(),
            );
            let valid = case["valid"].as_bool().unwrap();
            assert_eq!(outcome.is_ok(), valid, "{name}: {outcome:?}");
            if !valid {
                let expected = match case["why"].as_str().unwrap_or("") {
                    "timestamp outside 300 s tolerance" => SignatureError::Stale,
                    "timestamp must be epoch seconds" => SignatureError::Malformed,
                    _ => SignatureError::NoValidSignature,
                };
                assert_eq!(outcome, Err(expected), "{name}");
            }
        }
        // The shared body is a charge.complete event for pay_1.
        let event = scheme.parse(payload).unwrap();
        assert_eq!(
            event,
            PspEvent {
                event_id: "evnt_test_1".into(),
                kind: "charge.complete".into(),
                payment_id: Some("pay_1".into()),
                settlement: Some(Settlement::Succeeded {
                    provider_payment_id: "chrg_test_1".into()
                }),
                refund: None,
                refunds_changed: false,
                amount: Some(CheckedAmount {
                    minor: 3000,
                    currency: "jpy".into()
                }),
                livemode: None,
                account: None,
            }
        );
    }

    /// A scheme over raw keys, and a signer, for the tests below.
    fn scheme_for(keys: &[&[u8]]) -> OmiseWebhooks {
        let secrets: Vec<String> = keys
            .iter()
            .map(|k| b64::encode(k, Alphabet::Standard))
            .collect();
        OmiseWebhooks::new(&secrets).unwrap()
    }

    #[test]
    fn the_key_is_the_decoded_secret_and_rotation_accepts_either() {
        let body = br#"{"id":"evnt_1"}"#;
        let (a, b) = (b"secret-a".as_slice(), b"secret-b".as_slice());
        let by_a = signature(a, "1000", body);
        let by_b = signature(b, "1000", body);
        let check = |scheme: &OmiseWebhooks, sig: &str| {
            scheme.verify_values(Some(sig), Some("1000"), body, 1000)
        };
        assert_eq!(check(&scheme_for(&[a]), &by_a), Ok(()));
        assert_eq!(
            check(&scheme_for(&[a]), &by_b),
            Err(SignatureError::NoValidSignature)
        );
        // Two secrets configured (ours rotating), or two signatures sent (Omise's rotating).
        assert_eq!(check(&scheme_for(&[b, a]), &by_a), Ok(()));
        assert_eq!(check(&scheme_for(&[a]), &format!("{by_b},{by_a}")), Ok(()));
        assert_eq!(
            check(&scheme_for(&[a]), &format!("{by_b} , {by_a} ")),
            Ok(())
        );
        // Hex case does not change the 32 bytes compared.
        assert_eq!(check(&scheme_for(&[a]), &by_a.to_uppercase()), Ok(()));
        // The base64 text itself is not the key.
        let text_key = b64::encode(a, Alphabet::Standard);
        let by_text = signature(text_key.as_bytes(), "1000", body);
        assert_eq!(
            check(&scheme_for(&[a]), &by_text),
            Err(SignatureError::NoValidSignature)
        );
        // A tampered body.
        assert_eq!(
            scheme_for(&[a]).verify_values(Some(&by_a), Some("1000"), br#"{"id":"evnt_2"}"#, 1000),
            Err(SignatureError::NoValidSignature)
        );
        // Entries that are not 64 hex digits are no signature.
        for sig in [
            "",
            ",",
            "00",
            "zz",
            &by_a[..63],
            &format!("{by_a}0"),
            &format!("v1={by_a}"),
        ] {
            assert_eq!(
                check(&scheme_for(&[a]), sig),
                Err(SignatureError::NoValidSignature),
                "{sig:?}"
            );
        }
    }

    #[test]
    fn the_timestamp_is_checked_itself_and_signed_as_sent() {
        let key = b"k".as_slice();
        let scheme = scheme_for(&[key]);
        let body = b"{}";
        let at = |ts: &str, now: i64| {
            scheme.verify_values(Some(&signature(key, ts, body)), Some(ts), body, now)
        };
        // 300 s either way is inside; 301 is not, even with a correct HMAC.
        assert_eq!(at("1000", 1300), Ok(()));
        assert_eq!(at("1300", 1000), Ok(()));
        assert_eq!(at("1000", 1301), Err(SignatureError::Stale));
        assert_eq!(at("1301", 1000), Err(SignatureError::Stale));
        assert_eq!(at("0", i64::MIN), Err(SignatureError::Stale));
        assert_eq!(at("9223372036854775807", -1), Err(SignatureError::Stale));
        // Not decimal epoch seconds, whatever the HMAC says.
        for ts in [
            "",
            "abc",
            "+1000",
            "-1000",
            " 1000",
            "1000 ",
            "1000.0",
            "1e3",
            "0x3e8",
            "99999999999999999999",
        ] {
            assert_eq!(at(ts, 1000), Err(SignatureError::Malformed), "{ts:?}");
        }
        // Signed as sent: leading zeros are part of the message.
        assert_eq!(at("0001000", 1000), Ok(()));
        assert_eq!(
            scheme.verify_values(
                Some(&signature(key, "1000", body)),
                Some("0001000"),
                body,
                1000
            ),
            Err(SignatureError::NoValidSignature)
        );
    }

    #[test]
    fn headers_missing_repeated_or_unreadable() {
        let key = b"k".as_slice();
        let scheme = scheme_for(&[key]);
        let body = b"{}";
        let sig = signature(key, "1000", body);
        let verify = |headers: &HeaderMap| scheme.verify(headers, body, 1000);
        assert_eq!(verify(&headers(Some(&sig), Some("1000"))), Ok(()));
        assert_eq!(
            verify(&headers(None, Some("1000"))),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(&headers(Some(&sig), None)),
            Err(SignatureError::Missing)
        );
        assert_eq!(verify(&HeaderMap::new()), Err(SignatureError::Missing));
        // Two timestamps: which one was signed?
        let mut two = headers(Some(&sig), Some("1000"));
        two.append(TIMESTAMP_HEADER, HeaderValue::from_static("1000"));
        assert_eq!(verify(&two), Err(SignatureError::Malformed));
        // Signatures split over two header lines are one list.
        let mut split = headers(Some(&"0".repeat(64)), Some("1000"));
        split.append(SIGNATURE_HEADER, HeaderValue::from_str(&sig).unwrap());
        assert_eq!(verify(&split), Ok(()));
        // Header values that are not text.
        let opaque = HeaderValue::from_bytes(b"\xff1000").unwrap();
        let mut bad = headers(Some(&sig), None);
        bad.insert(TIMESTAMP_HEADER, opaque.clone());
        assert_eq!(verify(&bad), Err(SignatureError::Malformed));
        let mut bad = headers(None, Some("1000"));
        bad.insert(SIGNATURE_HEADER, opaque);
        assert_eq!(verify(&bad), Err(SignatureError::Malformed));
    }

    #[test]
    fn unusable_secrets_are_refused_at_construction() {
        let none: [&str; 0] = [];
        assert_eq!(
            OmiseWebhooks::new(&none).unwrap_err(),
            OmiseSecretError::NoSecret
        );
        assert_eq!(
            OmiseWebhooks::new(&[""]).unwrap_err(),
            OmiseSecretError::Empty(0)
        );
        // Strict, padded, standard base64 only (the second secret is refused by position).
        for bad in [
            "not base64!",
            "cGF5b25jZQ",
            " cGF5b25jZQ==",
            "cGF5b25jZQ==\n",
            "cGF5b25jZR==",
            "cGF5-25jZQ==",
            "====",
        ] {
            assert_eq!(
                OmiseWebhooks::new(&[VECTOR_SECRET, bad]).unwrap_err(),
                OmiseSecretError::NotBase64(1),
                "{bad:?}"
            );
        }
        // "cGF5" is valid base64 ("pay"): any non-empty key is usable.
        assert!(OmiseWebhooks::new(&["cGF5"]).is_ok());
        let scheme = OmiseWebhooks::new(&[VECTOR_SECRET]).unwrap();
        assert_eq!(scheme.provider(), "omise");
        assert_eq!(scheme.with_provider("fake").provider(), "fake");
        let shown = format!("{:?}", OmiseWebhooks::new(&[VECTOR_SECRET]).unwrap());
        assert!(
            !shown.contains(VECTOR_SECRET) && !shown.contains("payonce"),
            "{shown}"
        );
    }

    /// An event as Omise sends it (API version 2019-05-29) about `data`.
    fn event(key: &str, livemode: bool, data: Value) -> Vec<u8> {
        json!({
            "object": "event",
            "id": "evnt_test_5xuy4w91xdz7ky4jnqc",
            "livemode": livemode,
            "location": "/events/evnt_test_5xuy4w91xdz7ky4jnqc",
            "webhook_deliveries": [],
            "data": data,
            "key": key,
            "created_at": "2024-05-03T08:36:12Z",
        })
        .to_string()
        .into_bytes()
    }

    /// A card charge as Omise serialises it (shape of omise-go's charges fixture).
    fn charge(status: &str, failure_code: Option<&str>) -> Value {
        json!({
            "object": "charge",
            "id": "chrg_test_4yq7duw15p9hdrjp8oq",
            "location": "/charges/chrg_test_4yq7duw15p9hdrjp8oq",
            "livemode": false,
            "amount": 100000,
            "currency": "thb",
            "description": "payonce pay_0123456789abcdef0123456789abcdef",
            "metadata": {"payment_id": "pay_0123456789abcdef0123456789abcdef"},
            "status": status,
            "capture": true,
            "authorized": status == "successful",
            "reversed": status == "reversed",
            "expired": status == "expired",
            "paid": status == "successful",
            "transaction": if status == "successful" { json!("trxn_test_4yq7duwb9jts1vxgqua") } else { Value::Null },
            "refunded_amount": 0,
            "refunds": {"object": "list", "data": [], "limit": 20, "offset": 0, "total": 0},
            "failure_code": failure_code,
            "failure_message": failure_code.map(|_| "the charge failed"),
            "card": {"object": "card", "id": "card_test_4yq6tuucl9h4erukfl0", "brand": "Visa", "last_digits": "4242"},
            "created_at": "2015-01-15T05:00:29Z",
        })
    }

    const PAY: &str = "pay_0123456789abcdef0123456789abcdef";
    const CHARGE: &str = "chrg_test_4yq7duw15p9hdrjp8oq";

    fn thb_1000() -> Option<CheckedAmount> {
        Some(CheckedAmount {
            minor: 100000,
            currency: "thb".into(),
        })
    }

    #[test]
    fn charge_events_settle_by_the_charge_status() {
        let declined = |code: &str| {
            Some(Settlement::Declined {
                provider_payment_id: Some(CHARGE.into()),
                decline_code: code.into(),
            })
        };
        let succeeded = Some(Settlement::Succeeded {
            provider_payment_id: CHARGE.into(),
        });
        let cases = [
            (
                "charge.complete",
                charge("successful", None),
                succeeded.clone(),
            ),
            (
                "charge.create",
                charge("successful", None),
                succeeded.clone(),
            ),
            ("charge.update", charge("successful", None), succeeded),
            ("charge.create", charge("pending", None), None),
            (
                "charge.complete",
                charge("failed", Some("insufficient_fund")),
                declined("insufficient_fund"),
            ),
            (
                "charge.create",
                charge("failed", Some("invalid_security_code")),
                declined("invalid_security_code"),
            ),
            (
                "charge.create",
                charge("failed", Some("invalid_account_number")),
                declined("invalid_account_number"),
            ),
            ("charge.update", charge("failed", None), declined("failed")),
            (
                "charge.update",
                charge("expired", None),
                declined("expired"),
            ),
            (
                "charge.update",
                charge("expired", Some("timeout")),
                declined("timeout"),
            ),
            (
                "charge.reverse",
                charge("reversed", None),
                declined("reversed"),
            ),
            ("charge.update", charge("unheard_of", None), None),
        ];
        for (key, data, settlement) in cases {
            let parsed = parse_event(&event(key, false, data.clone())).unwrap();
            assert_eq!(
                parsed,
                PspEvent {
                    event_id: "evnt_test_5xuy4w91xdz7ky4jnqc".into(),
                    kind: key.into(),
                    payment_id: Some(PAY.into()),
                    settlement,
                    refund: None,
                    refunds_changed: false,
                    amount: thb_1000(),
                    livemode: Some(false),
                    account: None,
                },
                "{key} {}",
                data["status"]
            );
        }
    }

    #[test]
    fn charge_events_report_mode_amount_and_currency_as_sent() {
        let mut live = charge("successful", None);
        live["currency"] = json!("THB");
        live["amount"] = json!(2000);
        let parsed = parse_event(&event("charge.complete", true, live)).unwrap();
        assert_eq!(parsed.livemode, Some(true));
        assert_eq!(
            parsed.amount,
            Some(CheckedAmount {
                minor: 2000,
                currency: "thb".into()
            })
        );
        // A yen charge is in whole yen (Omise's only zero-decimal currency).
        let mut yen = charge("successful", None);
        yen["currency"] = json!("jpy");
        yen["amount"] = json!(3000);
        let parsed = parse_event(&event("charge.complete", false, yen)).unwrap();
        assert_eq!(
            parsed.amount,
            Some(CheckedAmount {
                minor: 3000,
                currency: "jpy".into()
            })
        );
        // An event without livemode (older serialisations) reports none.
        let parsed = parse_event(br#"{"object":"event","id":"evnt_1","key":"charge.create","data":{"object":"charge","id":"chrg_1","status":"pending"}}"#).unwrap();
        assert_eq!((parsed.livemode, parsed.amount), (None, None));
    }

    #[test]
    fn a_charge_payonce_did_not_make_names_no_payment() {
        let mut foreign = charge("successful", None);
        foreign["metadata"] = json!({"order_id": "A-1"});
        let parsed = parse_event(&event("charge.complete", false, foreign)).unwrap();
        assert_eq!(parsed.payment_id, None);
        let mut bare = charge("successful", None);
        bare.as_object_mut().unwrap().remove("metadata");
        let parsed = parse_event(&event("charge.complete", false, bare)).unwrap();
        assert_eq!(parsed.payment_id, None);
    }

    /// A refund as Omise serialises it (refunds API; omise-php's refunds-post fixture).
    fn refund(metadata: Value, status: Option<&str>) -> Value {
        let mut refund = json!({
            "object": "refund",
            "id": "rfnd_test_4yqmv79ahghsiz23y3c",
            "location": "/charges/chrg_test_4yq7duw15p9hdrjp8oq/refunds/rfnd_test_4yqmv79ahghsiz23y3c",
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

    #[test]
    fn refund_create_names_our_refund_as_succeeded() {
        let ours =
            json!({"refund_id": "rfd_0123456789abcdef0123456789abcdef_1", "payment_id": PAY});
        let refunded = |settlement: RefundSettlement| PspEvent {
            event_id: "evnt_test_5xuy4w91xdz7ky4jnqc".into(),
            kind: "refund.create".into(),
            payment_id: Some(PAY.into()),
            settlement: None,
            refund: Some(RefundEvent {
                refund_id: "rfd_0123456789abcdef0123456789abcdef_1".into(),
                settlement,
            }),
            refunds_changed: false,
            amount: Some(CheckedAmount {
                minor: 10000,
                currency: "thb".into(),
            }),
            livemode: Some(false),
            account: None,
        };
        let succeeded = RefundSettlement::Succeeded {
            provider_refund_id: "rfnd_test_4yqmv79ahghsiz23y3c".into(),
        };
        for status in [None, Some("closed")] {
            let parsed =
                parse_event(&event("refund.create", false, refund(ours.clone(), status))).unwrap();
            assert_eq!(parsed, refunded(succeeded.clone()), "{status:?}");
        }
        // A void is a refund too.
        let mut voided = refund(ours.clone(), Some("closed"));
        voided["voided"] = json!(true);
        let parsed = parse_event(&event("refund.create", false, voided)).unwrap();
        assert_eq!(parsed, refunded(succeeded));
        // A failed refund fails, whatever it read before.
        let parsed = parse_event(&event(
            "refund.create",
            false,
            refund(ours.clone(), Some("failed")),
        ))
        .unwrap();
        assert_eq!(
            parsed,
            refunded(RefundSettlement::Failed {
                provider_refund_id: Some("rfnd_test_4yqmv79ahghsiz23y3c".into()),
                code: "failed".into()
            })
        );
        // An undocumented status is not taken as final.
        let parsed = parse_event(&event(
            "refund.create",
            false,
            refund(ours, Some("pending")),
        ))
        .unwrap();
        assert_eq!(
            parsed,
            refunded(RefundSettlement::Pending {
                provider_refund_id: "rfnd_test_4yqmv79ahghsiz23y3c".into()
            })
        );
    }

    #[test]
    fn a_refund_payonce_did_not_make_names_none_of_ours() {
        for metadata in [json!({}), json!({"payment_id": PAY}), Value::Null] {
            let parsed = parse_event(&event(
                "refund.create",
                false,
                refund(metadata.clone(), None),
            ))
            .unwrap();
            assert_eq!(
                (parsed.refund, parsed.settlement),
                (None, None),
                "{metadata}"
            );
            assert!(!parsed.refunds_changed);
        }
    }

    #[test]
    fn other_events_apply_nothing_and_garbage_is_an_error() {
        let customer = json!({"object": "customer", "id": "cust_test_1", "metadata": {}});
        let parsed = parse_event(&event("customer.create", false, customer)).unwrap();
        assert_eq!(
            (
                parsed.payment_id,
                parsed.settlement,
                parsed.refund,
                parsed.amount
            ),
            (None, None, None, None)
        );
        assert_eq!(parsed.kind, "customer.create");
        assert!(parse_event(b"not json").is_err());
        assert!(parse_event(br#"{"object":"event","key":"charge.create"}"#).is_err());
        assert!(parse_event(br#"{"object":"event","id":"evnt_1"}"#).is_err());
    }
}
